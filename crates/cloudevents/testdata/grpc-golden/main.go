// Prints the protobuf encodings (deterministic, hex) of work-protocol events written by sdk-go's
// gRPC binding, for golden tests of another implementation.
package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"google.golang.org/protobuf/proto"

	pbv1 "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc/protobuf/v1"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc/protocol"
)

const prefix = "io.open-cluster-management.works.v1alpha1.manifestbundles."

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func encode(name string, evt cloudevents.Event) {
	pb := &pbv1.CloudEvent{}
	must(protocol.WritePBMessage(context.Background(), binding.ToMessage(&evt), pb))
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(pb)
	must(err)
	fmt.Printf("%s %s\n", name, hex.EncodeToString(b))
}

func main() {
	t := time.Date(2026, 11, 24, 10, 0, 0, 123456789, time.UTC)

	spec := cloudevents.NewEvent()
	spec.SetID("7cd72b22-0000-4000-8000-000000000001")
	spec.SetSource("maestro")
	spec.SetType(prefix + "spec.create_request")
	spec.SetTime(t)
	spec.SetExtension("resourceid", "4717d8e0-0000-4000-8000-000000000002")
	spec.SetExtension("resourceversion", int64(1))
	spec.SetExtension("clustername", "cluster1")
	spec.SetExtension("metadata", `{"name":"w1"}`)
	must(spec.SetData("application/json", []byte(`{"manifests":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c1","namespace":"default"}}]}`)))
	encode("spec_create", spec)

	status := cloudevents.NewEvent()
	status.SetID("y")
	status.SetSource("cluster1-work-agent")
	status.SetType(prefix + "status.update_request")
	status.SetTime(t)
	status.SetExtension("resourceid", "0a1a")
	status.SetExtension("resourceversion", int64(2147483647))
	status.SetExtension("clustername", "cluster1")
	status.SetExtension("originalsource", "maestro")
	status.SetExtension("sequenceid", "2125174315350495232")
	status.SetExtension("statushash", "ab")
	must(status.SetData("application/json", []byte(`{"conditions":[],"resourceStatus":[]}`)))
	encode("status_update", status)

	resync := cloudevents.NewEvent()
	resync.SetID("r")
	resync.SetSource("cluster1-work-agent")
	resync.SetType(prefix + "spec.resync_request")
	resync.SetTime(t)
	resync.SetExtension("clustername", "cluster1")
	resync.SetExtension("originalsource", "")
	must(resync.SetData("application/json", []byte(`{"resourceVersions":[{"resourceID":"0a1a","resourceVersion":3}]}`)))
	encode("spec_resync_request", resync)

	gone := cloudevents.NewEvent()
	gone.SetID("d")
	gone.SetSource("source")
	gone.SetType(prefix + "spec.resync_response")
	gone.SetTime(t)
	gone.SetExtension("resourceid", "00000000-0000-0000-0000-000000000001")
	gone.SetExtension("clustername", "cluster1")
	gone.SetExtension("originalsource", "")
	gone.SetExtension("deletiontimestamp", time.Date(2026, 11, 24, 10, 25, 46, 906900000, time.UTC))
	encode("spec_resync_delete", gone)

	if err := status.Context.SetExtension("resourceversion", int64(2147483648)); err != nil {
		fmt.Printf("int32_overflow %v\n", err)
	}
}
