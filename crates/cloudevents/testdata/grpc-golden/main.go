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

// event is a work-protocol event of type prefix+typ with its extensions, given as name, value
// pairs in order.
func event(id, source, typ string, t time.Time, extensions ...interface{}) cloudevents.Event {
	evt := cloudevents.NewEvent()
	evt.SetID(id)
	evt.SetSource(source)
	evt.SetType(prefix + typ)
	evt.SetTime(t)
	for i := 0; i+1 < len(extensions); i += 2 {
		evt.SetExtension(extensions[i].(string), extensions[i+1])
	}
	return evt
}

func main() {
	t := time.Date(2026, 11, 24, 10, 0, 0, 123456789, time.UTC)

	spec := event("7cd72b22-0000-4000-8000-000000000001", "maestro", "spec.create_request", t,
		"resourceid", "4717d8e0-0000-4000-8000-000000000002",
		"resourceversion", int64(1),
		"clustername", "cluster1",
		"metadata", `{"name":"w1"}`)
	must(spec.SetData("application/json", []byte(`{"manifests":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c1","namespace":"default"}}]}`)))
	encode("spec_create", spec)

	status := event("y", "cluster1-work-agent", "status.update_request", t,
		"resourceid", "0a1a",
		"resourceversion", int64(2147483647),
		"clustername", "cluster1",
		"originalsource", "maestro",
		"sequenceid", "2125174315350495232",
		"statushash", "ab")
	must(status.SetData("application/json", []byte(`{"conditions":[],"resourceStatus":[]}`)))
	encode("status_update", status)

	resync := event("r", "cluster1-work-agent", "spec.resync_request", t,
		"clustername", "cluster1",
		"originalsource", "")
	must(resync.SetData("application/json", []byte(`{"resourceVersions":[{"resourceID":"0a1a","resourceVersion":3}]}`)))
	encode("spec_resync_request", resync)

	gone := event("d", "source", "spec.resync_response", t,
		"resourceid", "00000000-0000-0000-0000-000000000001",
		"clustername", "cluster1",
		"originalsource", "",
		"deletiontimestamp", time.Date(2026, 11, 24, 10, 25, 46, 906900000, time.UTC))
	encode("spec_resync_delete", gone)

	if err := status.Context.SetExtension("resourceversion", int64(2147483648)); err != nil {
		fmt.Printf("int32_overflow %v\n", err)
	}
}
