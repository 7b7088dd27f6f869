# The Ruby client (Bunny, Debian's ruby-bunny), unmodified, against a running broker:
# tests/e2e/test_e2e_go_ruby.py runs this with AMQP_URL and HTTP_URL set. Each step prints its
# name; the first failure prints FAIL and exits 1.
require "bunny"
require "json"
require "net/http"
require "timeout"

def fail!(what)
  puts "FAIL #{what}"
  exit 1
end

def step(name)
  puts "step #{name}"
  $stdout.flush
end

# waits for ``queue`` to get a value, at most ``seconds``
def take(queue, seconds, what)
  Timeout.timeout(seconds) { queue.pop }
rescue Timeout::Error
  fail!("timed out waiting for #{what}")
end

# Bunny hands connection-level errors to this object's #raise (by default it raises them
# asynchronously in the thread that started the session)
class ErrorSink
  attr_reader :errors

  def initialize
    @errors = Queue.new
  end

  def raise(error)
    @errors << error
  end
end

STAMP = Time.at(1_700_000_000)
sink = ErrorSink.new
conn = Bunny.new(ENV.fetch("AMQP_URL"), automatically_recover: false, recover_from_connection_close: false,
                 logger: Logger.new(nil),
                 heartbeat: 10, client_properties: { connection_name: "ruby-client-check" },
                 session_error_handler: sink)
conn.start
ch = conn.create_channel

step "topology: a topic exchange bound to a fanout exchange, a queue bound to the topic one"
fanout = ch.fanout("rb-in", auto_delete: true)
topic = ch.topic("rb-events", auto_delete: true)
topic.bind(fanout)
q = ch.queue("", exclusive: true, arguments: { "x-max-length" => 1000 })
q.bind(topic, routing_key: "order.*")

step "confirmed persistent publishes with every property and typed headers"
ch.confirm_select
headers = { "s" => "text", "f" => 1.5, "b" => true, "t" => STAMP, "nested" => { "k" => "v" }, "list" => ["a", 2] }
10.times do |i|
  fanout.publish("m#{i}", routing_key: "order.created", persistent: true, content_type: "text/plain",
                 content_encoding: "utf-8", priority: 3, correlation_id: "corr", reply_to: "replies",
                 expiration: "60000", message_id: "id-#{i}", timestamp: STAMP.to_i, type: "kind",
                 app_id: "rb-check", headers: headers.merge("n" => i))
end
fail!("publishes nacked") unless ch.wait_for_confirms

step "a mandatory publish nothing is bound for comes back with 312 NO_ROUTE"
returns = Queue.new
topic.on_return { |info, _props, body| returns << [info.reply_code, info.routing_key, body] }
topic.publish("r", routing_key: "nowhere", mandatory: true)
returned = take(returns, 10, "basic.return")
fail!("return #{returned.inspect}") unless returned == [312, "nowhere", "r"]
fail!("the returned publish was not confirmed") unless ch.wait_for_confirms

step "prefetch 3, a nack with requeue comes back redelivered, properties arrive intact"
ch.prefetch(3)
seen = Queue.new
redelivered = 0
nacked = false
consumer = q.subscribe(manual_ack: true, consumer_tag: "rb-consumer") do |info, props, body|
  unless nacked
    nacked = true
    ch.nack(info.delivery_tag, false, true)
    next
  end
  redelivered += 1 if info.redelivered?
  n = props.headers["n"]
  problem = nil
  problem = "properties #{props.inspect}" unless props.content_type == "text/plain" && props.content_encoding == "utf-8" &&
                                                 props.delivery_mode == 2 && props.priority == 3 &&
                                                 props.correlation_id == "corr" && props.reply_to == "replies" &&
                                                 props.expiration == "60000" && props.timestamp == STAMP &&
                                                 props.type == "kind" && props.app_id == "rb-check" &&
                                                 info.exchange == "rb-in" && info.routing_key == "order.created"
  headers.each { |k, v| problem ||= "header #{k}: #{props.headers[k].inspect}" unless props.headers[k] == v }
  problem ||= "body #{body.inspect} for #{n}" unless body == "m#{n}" && props.message_id == "id-#{n}"
  ch.ack(info.delivery_tag)
  seen << (problem || props.message_id)
end
ids = Array.new(10) { take(seen, 10, "deliveries") }
bad = ids.find { |id| !id.start_with?("id-") }
fail!(bad) if bad
fail!("ids #{ids.inspect}") unless ids.uniq.size == 10
fail!("#{redelivered} redelivered, want 1") unless redelivered == 1
consumer.cancel

step "passive declare of a missing queue: 404 closes that channel only"
ch2 = conn.create_channel
begin
  ch2.queue("rb-missing-queue", passive: true)
  fail!("passive declare did not fail")
rescue Bunny::NotFound => e
  fail!("passive declare: #{e.channel_close.reply_code}") unless e.channel_close.reply_code == 404
end

step "basic.get on an empty queue, then a committed transaction"
ch3 = conn.create_channel
_info, _props, body = ch3.basic_get(q.name, manual_ack: false)
fail!("get on empty queue: #{body.inspect}") unless body.nil?
ch3.tx_select
ch3.default_exchange.publish("tx", routing_key: q.name)
_info, _props, body = ch3.basic_get(q.name, manual_ack: false)
fail!("an uncommitted publish was delivered") unless body.nil?
ch3.tx_commit
info, _props, body = ch3.basic_get(q.name, manual_ack: true)
fail!("get after commit: #{body.inspect}") unless body == "tx"
ch3.ack(info.delivery_tag)

step "deleting a consumed queue cancels its consumer (consumer_cancel_notify)"
side = ch3.queue("rb-side")
cancels = Queue.new
side_consumer = Bunny::Consumer.new(ch, ch.queue("rb-side", passive: true), "rb-side-consumer")
side_consumer.on_cancellation { |method| cancels << method.consumer_tag }
ch.basic_consume_with(side_consumer)
side.delete
tag = take(cancels, 10, "basic.cancel")
fail!("cancelled #{tag}") unless tag == "rb-side-consumer"
fail!("blocked without an alarm") if conn.blocked?

step "closing the connection from the management API reaches the client as 320"
base = URI(ENV.fetch("HTTP_URL"))
http = Net::HTTP.new(base.host, base.port)
name = nil
deadline = Time.now + 10
while name.nil? && Time.now < deadline
  req = Net::HTTP::Get.new("/api/connections")
  req.basic_auth("guest", "guest")
  listed = JSON.parse(http.request(req).body)
  found = listed.find { |c| (c["client_properties"] || {})["connection_name"] == "ruby-client-check" }
  name = found && found["name"]
  sleep 0.1 unless name # the connection list is a snapshot: not listed yet
end
fail!("connection not listed") unless name
req = Net::HTTP::Delete.new("/api/connections/#{URI.encode_www_form_component(name).gsub('+', '%20')}")
req.basic_auth("guest", "guest")
req["X-Reason"] = "ruby check"
status = http.request(req).code
fail!("DELETE connection: #{status}") unless status == "204"
error = take(sink.errors, 10, "the connection's close")
unless error.is_a?(Bunny::ConnectionForced) && error.connection_close.reply_code == 320
  fail!("close: #{error.inspect}")
end
fail!("still open") if conn.open?
puts "OK"
