// The Go client (github.com/rabbitmq/amqp091-go, Debian's package), unmodified, against a running
// broker: tests/e2e/test_e2e_go_ruby.py builds and runs this with AMQP_URL and HTTP_URL set. Each
// step prints its name; the first failure prints FAIL and exits 1.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func must(err error, what string) {
	if err != nil {
		fail(fmt.Sprintf("%s: %v", what, err))
	}
}

func fail(what string) {
	fmt.Println("FAIL", what)
	os.Exit(1)
}

func step(name string) { fmt.Println("step", name) }

var stamp = time.Unix(1700000000, 0)

func main() {
	conn, err := amqp.DialConfig(os.Getenv("AMQP_URL"), amqp.Config{
		Properties: amqp.Table{"connection_name": "go-client-check"}, Heartbeat: 10 * time.Second})
	must(err, "dial")
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	blocked := conn.NotifyBlocked(make(chan amqp.Blocking, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ch, err := conn.Channel()
	must(err, "channel")

	step("topology: a topic exchange bound to a fanout exchange, a queue bound to the topic one")
	must(ch.ExchangeDeclare("go-in", "fanout", false, true, false, false, nil), "exchange.declare fanout")
	must(ch.ExchangeDeclare("go-events", "topic", false, true, false, false, nil), "exchange.declare topic")
	must(ch.ExchangeBind("go-events", "", "go-in", false, nil), "exchange.bind")
	q, err := ch.QueueDeclare("", false, false, true, false, amqp.Table{"x-max-length": int32(1000)})
	must(err, "queue.declare")
	must(ch.QueueBind(q.Name, "order.*", "go-events", false, nil), "queue.bind")

	step("confirmed persistent publishes with every property and typed headers")
	must(ch.Confirm(false), "confirm.select")
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 100))
	returns := ch.NotifyReturn(make(chan amqp.Return, 10))
	headers := amqp.Table{"s": "text", "f": 1.5, "b": true, "t": stamp, "nested": amqp.Table{"k": "v"},
		"list": []interface{}{"a", int32(2)}}
	for i := 0; i < 10; i++ {
		h := amqp.Table{"n": int32(i)}
		for k, v := range headers {
			h[k] = v
		}
		must(ch.PublishWithContext(ctx, "go-in", "order.created", false, false, amqp.Publishing{
			ContentType: "text/plain", ContentEncoding: "utf-8", DeliveryMode: amqp.Persistent, Priority: 3,
			CorrelationId: "corr", ReplyTo: "replies", Expiration: "60000", MessageId: fmt.Sprintf("id-%d", i),
			Timestamp: stamp, Type: "kind", AppId: "go-check", Headers: h, Body: []byte(fmt.Sprintf("m%d", i)),
		}), "publish")
	}
	for i := 1; i <= 10; i++ {
		select {
		case c := <-confirms:
			if !c.Ack || c.DeliveryTag != uint64(i) {
				fail(fmt.Sprintf("confirm %d: %+v", i, c))
			}
		case <-time.After(10 * time.Second):
			fail("no confirm")
		}
	}

	step("a mandatory publish nothing is bound for comes back with 312 NO_ROUTE")
	must(ch.PublishWithContext(ctx, "go-events", "nowhere", true, false, amqp.Publishing{Body: []byte("r")}), "mandatory")
	select {
	case r := <-returns:
		if r.ReplyCode != 312 || r.RoutingKey != "nowhere" || string(r.Body) != "r" {
			fail(fmt.Sprintf("return %+v", r))
		}
	case <-time.After(10 * time.Second):
		fail("no basic.return")
	}
	<-confirms // an unroutable mandatory publish is confirmed after its return

	step("prefetch 3, a nack with requeue comes back redelivered, properties arrive intact")
	must(ch.Qos(3, 0, false), "basic.qos")
	msgs, err := ch.Consume(q.Name, "go-consumer", false, false, false, false, nil)
	must(err, "basic.consume")
	seen := map[string]bool{}
	redelivered := 0
	nacked := false
	for len(seen) < 10 {
		select {
		case d := <-msgs:
			if !nacked {
				nacked = true
				must(d.Nack(false, true), "nack")
				continue
			}
			if d.Redelivered {
				redelivered++
			}
			if d.ContentType != "text/plain" || d.ContentEncoding != "utf-8" || d.DeliveryMode != 2 ||
				d.Priority != 3 || d.CorrelationId != "corr" || d.ReplyTo != "replies" || d.Expiration != "60000" ||
				!d.Timestamp.Equal(stamp) || d.Type != "kind" || d.AppId != "go-check" || d.Exchange != "go-in" ||
				d.RoutingKey != "order.created" {
				fail(fmt.Sprintf("properties %+v", d))
			}
			for k, v := range headers {
				got := d.Headers[k]
				if t, ok := v.(time.Time); ok {
					if gt, ok := got.(time.Time); !ok || !gt.Equal(t) {
						fail(fmt.Sprintf("header %s: %#v", k, got))
					}
				} else if !reflect.DeepEqual(got, v) {
					fail(fmt.Sprintf("header %s: %#v, want %#v", k, got, v))
				}
			}
			if string(d.Body) != fmt.Sprintf("m%d", d.Headers["n"]) || d.MessageId != fmt.Sprintf("id-%d", d.Headers["n"]) {
				fail(fmt.Sprintf("body %q for %v", d.Body, d.Headers["n"]))
			}
			seen[d.MessageId] = true
			must(d.Ack(false), "ack")
		case <-time.After(10 * time.Second):
			fail(fmt.Sprintf("deliveries stopped after %d", len(seen)))
		}
	}
	if redelivered != 1 {
		fail(fmt.Sprintf("%d redelivered, want 1", redelivered))
	}
	must(ch.Cancel("go-consumer", false), "basic.cancel")

	step("passive declare of a missing queue: 404 closes that channel only")
	ch2, err := conn.Channel()
	must(err, "channel 2")
	_, err = ch2.QueueDeclarePassive("go-missing-queue", false, false, false, false, nil)
	if e, ok := err.(*amqp.Error); !ok || e.Code != 404 {
		fail(fmt.Sprintf("passive declare: %v", err))
	}

	step("basic.get on an empty queue, then a committed transaction")
	ch3, err := conn.Channel()
	must(err, "channel 3")
	if _, ok, err := ch3.Get(q.Name, true); err != nil || ok {
		fail(fmt.Sprintf("get on empty queue: ok=%v err=%v", ok, err))
	}
	must(ch3.Tx(), "tx.select")
	must(ch3.PublishWithContext(ctx, "", q.Name, false, false, amqp.Publishing{Body: []byte("tx")}), "tx publish")
	if _, ok, _ := ch3.Get(q.Name, true); ok {
		fail("an uncommitted publish was delivered")
	}
	must(ch3.TxCommit(), "tx.commit")
	d, ok, err := ch3.Get(q.Name, false)
	if err != nil || !ok || string(d.Body) != "tx" {
		fail(fmt.Sprintf("get after commit: ok=%v err=%v", ok, err))
	}
	must(d.Ack(false), "ack get")

	step("deleting a consumed queue cancels its consumer (consumer_cancel_notify)")
	side, err := ch3.QueueDeclare("go-side", false, false, false, false, nil)
	must(err, "queue.declare go-side")
	cancels := ch.NotifyCancel(make(chan string, 1))
	_, err = ch.Consume(side.Name, "go-side-consumer", false, false, false, false, nil)
	must(err, "consume go-side")
	_, err = ch3.QueueDelete(side.Name, false, false, false)
	must(err, "queue.delete")
	select {
	case tag := <-cancels:
		if tag != "go-side-consumer" {
			fail("cancelled " + tag)
		}
	case <-time.After(10 * time.Second):
		fail("no basic.cancel")
	}
	select {
	case b := <-blocked:
		fail(fmt.Sprintf("connection.blocked without an alarm: %+v", b))
	default:
	}

	step("closing the connection from the management API reaches the client as 320")
	closeByName(os.Getenv("HTTP_URL"), "go-client-check")
	select {
	case e := <-closed:
		if e == nil || e.Code != 320 || !e.Server {
			fail(fmt.Sprintf("close: %+v", e))
		}
	case <-time.After(10 * time.Second):
		fail("the connection was not closed")
	}
	fmt.Println("OK")
}

// closeByName finds the connection by its client-given name and deletes it, as an operator would.
func closeByName(base, name string) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest("GET", base+"/api/connections", nil)
		req.SetBasicAuth("guest", "guest")
		resp, err := http.DefaultClient.Do(req)
		must(err, "GET /api/connections")
		var conns []struct {
			Name             string                 `json:"name"`
			ClientProperties map[string]interface{} `json:"client_properties"`
		}
		must(json.NewDecoder(resp.Body).Decode(&conns), "decode connections")
		resp.Body.Close()
		for _, c := range conns {
			if c.ClientProperties["connection_name"] == name {
				req, _ := http.NewRequest("DELETE", base+"/api/connections/"+url.PathEscape(c.Name), nil)
				req.SetBasicAuth("guest", "guest")
				req.Header.Set("X-Reason", "go check")
				resp, err := http.DefaultClient.Do(req)
				must(err, "DELETE connection")
				resp.Body.Close()
				if resp.StatusCode != 204 {
					fail(fmt.Sprintf("DELETE connection: %d", resp.StatusCode))
				}
				return
			}
		}
		time.Sleep(100 * time.Millisecond) // the connection list is a snapshot: not listed yet
	}
	fail("connection " + name + " not listed")
}
