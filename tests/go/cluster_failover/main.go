// An amqp091-go publisher through a cluster's failover (tests/cluster/test_cluster_clients.py
// builds and runs it). amqp091-go does not reconnect by itself: this is the reconnect loop an
// application writes, over a list of node URLs (AMQP_URLS, comma-separated, tried in turn), with a
// new confirm channel after each connect. Persistent messages numbered 0, 1, ... each waited for
// its confirm; prints "kill" once KILL_AFTER are confirmed (the test then kills the leader), and at
// the end one JSON line: the numbers confirmed and the reconnects made.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func envInt(name string, fallback int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return fallback
}

// dial tries each URL in turn until one answers, and opens a confirm channel with the queue on it
func dial(urls []string, queue string) (*amqp.Connection, *amqp.Channel) {
	for i := 0; ; i++ {
		url := urls[i%len(urls)]
		conn, err := amqp.DialConfig(url, amqp.Config{Heartbeat: 10 * time.Second, Dial: amqp.DefaultDial(2 * time.Second)})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		ch, err := conn.Channel()
		if err == nil {
			err = ch.Confirm(false)
		}
		if err == nil {
			_, err = ch.QueueDeclare(queue, true, false, false, false, nil)
		}
		if err != nil {
			conn.Close()
			time.Sleep(100 * time.Millisecond)
			continue
		}
		return conn, ch
	}
}

func main() {
	urls := strings.Split(os.Getenv("AMQP_URLS"), ",")
	queue := os.Getenv("QUEUE")
	killAfter, after := envInt("KILL_AFTER", 200), envInt("AFTER", 200)
	deadline := time.Now().Add(60 * time.Second)
	conn, ch := dial(urls, queue)
	var done []int
	killed, reconnects, afterReconnect := false, 0, 0
	for n := 0; time.Now().Before(deadline) && afterReconnect < after; n++ {
		ok := false
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		confirm, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, Body: []byte(strconv.Itoa(n))})
		if err == nil {
			ok = confirm.Wait() // false on a nack, a closed channel, or the 5 s passed
		}
		cancel()
		if err == nil && ok {
			done = append(done, n)
			if reconnects > 0 {
				afterReconnect++
			}
		} else {
			// the connection or channel is gone (or a confirm never came): drop it, reconnect
			conn.Close()
			conn, ch = dial(urls, queue)
			reconnects++
		}
		if !killed && len(done) >= killAfter {
			killed = true
			fmt.Println("kill")
		}
	}
	conn.Close()
	out, _ := json.Marshal(map[string]interface{}{"confirmed": done, "reconnects": reconnects, "after": afterReconnect})
	fmt.Println(string(out))
	if afterReconnect < after {
		os.Exit(1)
	}
}
