// Command pubsub-fake serves Google's own Pub/Sub fake (pstest, from cloud.google.com/go/pubsub/v2)
// on 127.0.0.1 for the agent's tests, with the topics and the source's subscriptions that
// Maestro's init-pubsub-emulator.sh creates: topics sourceevents, sourcebroadcast, agentevents,
// agentbroadcast; subscriptions agentevents-<source> (filtered on ce-originalsource) and
// agentbroadcast-<source>. An agent's subscriptions are created by whoever deploys the agent
// (Maestro's agent chart): the test harness, or --consumers for the named ones (what the chart's
// pre-install hook creates). All state is in memory: a restart loses it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
)

func main() {
	addr := flag.String("address", "127.0.0.1:0", "listen address")
	project := flag.String("project", "maestro-test", "project ID")
	source := flag.String("source", "maestro", "source ID whose subscriptions are created")
	consumers := flag.String("consumers", "", "comma-separated consumers whose subscriptions are created")
	streamTimeout := flag.Duration("stream-timeout", 0, "end every pull stream after this long, as Pub/Sub does after about 30 minutes (0: never)")
	flag.Parse()

	srv := pstest.NewServerWithAddress(*addr)
	srv.SetStreamTimeout(*streamTimeout)
	ctx := context.Background()
	topic := func(name string) string { return fmt.Sprintf("projects/%s/topics/%s", *project, name) }
	for _, name := range []string{"sourceevents", "sourcebroadcast", "agentevents", "agentbroadcast"} {
		if _, err := srv.GServer.CreateTopic(ctx, &pubsubpb.Topic{Name: topic(name)}); err != nil {
			log.Fatalf("create topic %s: %v", name, err)
		}
	}
	subs := []*pubsubpb.Subscription{
		{
			Name:  fmt.Sprintf("projects/%s/subscriptions/agentevents-%s", *project, *source),
			Topic: topic("agentevents"),
			// The chart's spelling: pstest's filter parser reads no quoted attribute names.
			Filter: fmt.Sprintf(`attributes.ce-originalsource="%s"`, *source),
		},
		{
			Name:  fmt.Sprintf("projects/%s/subscriptions/agentbroadcast-%s", *project, *source),
			Topic: topic("agentbroadcast"),
		},
	}
	for _, c := range strings.Split(*consumers, ",") {
		if c == "" {
			continue
		}
		subs = append(subs,
			&pubsubpb.Subscription{
				Name:   fmt.Sprintf("projects/%s/subscriptions/sourceevents-%s", *project, c),
				Topic:  topic("sourceevents"),
				Filter: fmt.Sprintf(`attributes.ce-clustername="%s"`, c),
			},
			&pubsubpb.Subscription{
				Name:  fmt.Sprintf("projects/%s/subscriptions/sourcebroadcast-%s", *project, c),
				Topic: topic("sourcebroadcast"),
			})
	}
	for _, s := range subs {
		s.AckDeadlineSeconds = 10
		if _, err := srv.GServer.CreateSubscription(ctx, s); err != nil {
			log.Fatalf("create subscription %s: %v", s.Name, err)
		}
	}
	// The address on one line, for the script or test that started it.
	fmt.Println(srv.Addr)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	_ = srv.Close()
}
