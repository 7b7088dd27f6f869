// RabbitMQ's Java client (com.rabbitmq:amqp-client, Debian's librabbitmq-client-java), unmodified,
// against a running broker: tests/e2e/test_e2e_java.py runs this with `java` in source-file mode,
// AMQP_URL and HTTP_URL set. Each step prints its name; the first failure prints FAIL and exits 1.

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.DefaultConsumer;
import com.rabbitmq.client.Envelope;
import com.rabbitmq.client.GetResponse;
import com.rabbitmq.client.ShutdownSignalException;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Date;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

public class ClientCheck {
    static void fail(String what) {
        System.out.println("FAIL " + what);
        System.out.flush();
        System.exit(1);
    }

    static void step(String name) {
        System.out.println("step " + name);
        System.out.flush();
    }

    static <T> T take(BlockingQueue<T> queue, String what) throws InterruptedException {
        T item = queue.poll(10, TimeUnit.SECONDS);
        if (item == null) fail("timed out waiting for " + what);
        return item;
    }

    static final Date STAMP = new Date(1_700_000_000_000L);

    public static void main(String[] args) throws Exception {
        ConnectionFactory factory = new ConnectionFactory();
        factory.setUri(System.getenv("AMQP_URL"));
        factory.setAutomaticRecoveryEnabled(false);
        factory.setRequestedHeartbeat(10);
        Map<String, Object> clientProperties = factory.getClientProperties();
        clientProperties.put("connection_name", "java-client-check");
        Connection conn = factory.newConnection();
        BlockingQueue<ShutdownSignalException> closed = new ArrayBlockingQueue<>(1);
        conn.addShutdownListener(closed::offer);
        Channel ch = conn.createChannel();

        step("topology: a topic exchange bound to a fanout exchange, a queue bound to the topic one");
        ch.exchangeDeclare("java-in", "fanout", false, true, null);
        ch.exchangeDeclare("java-events", "topic", false, true, null);
        ch.exchangeBind("java-events", "java-in", "");
        Map<String, Object> queueArgs = new HashMap<>();
        queueArgs.put("x-max-length", 1000);
        String q = ch.queueDeclare("", false, true, false, queueArgs).getQueue();
        ch.queueBind(q, "java-events", "order.*");

        step("confirmed persistent publishes with every property and typed headers");
        ch.confirmSelect();
        Map<String, Object> nested = new HashMap<>();
        nested.put("k", "v");
        List<Object> list = new ArrayList<>();
        list.add("a");
        list.add(2);
        for (int i = 0; i < 10; i++) {
            Map<String, Object> headers = new HashMap<>();
            headers.put("n", i);
            headers.put("s", "text");
            headers.put("f", 1.5);
            headers.put("b", true);
            headers.put("t", STAMP);
            headers.put("nested", nested);
            headers.put("list", list);
            AMQP.BasicProperties props = new AMQP.BasicProperties.Builder()
                .contentType("text/plain").contentEncoding("utf-8").deliveryMode(2).priority(3)
                .correlationId("corr").replyTo("replies").expiration("60000").messageId("id-" + i)
                .timestamp(STAMP).type("kind").appId("java-check").headers(headers).build();
            ch.basicPublish("java-in", "order.created", props, ("m" + i).getBytes(StandardCharsets.UTF_8));
        }
        if (!ch.waitForConfirms(10_000)) fail("publishes nacked");

        step("a mandatory publish nothing is bound for comes back with 312 NO_ROUTE");
        BlockingQueue<String> returns = new ArrayBlockingQueue<>(1);
        ch.addReturnListener((code, text, exchange, key, props, body) ->
            returns.offer(code + " " + key + " " + new String(body, StandardCharsets.UTF_8)));
        ch.basicPublish("java-events", "nowhere", true, new AMQP.BasicProperties(), "r".getBytes());
        String returned = take(returns, "basic.return");
        if (!returned.equals("312 nowhere r")) fail("return " + returned);
        if (!ch.waitForConfirms(10_000)) fail("the returned publish was not confirmed");

        step("prefetch 3, a nack with requeue comes back redelivered, properties arrive intact");
        ch.basicQos(3);
        BlockingQueue<String> seen = new ArrayBlockingQueue<>(20);
        int[] redelivered = {0};
        boolean[] nacked = {false};
        ch.basicConsume(q, false, "java-consumer", new DefaultConsumer(ch) {
            @Override
            public void handleDelivery(String tag, Envelope env, AMQP.BasicProperties p, byte[] body) throws IOException {
                if (!nacked[0]) {
                    nacked[0] = true;
                    getChannel().basicNack(env.getDeliveryTag(), false, true);
                    return;
                }
                if (env.isRedeliver()) redelivered[0]++;
                Map<String, Object> h = p.getHeaders();
                Object n = h.get("n");
                String problem = null;
                if (!"text/plain".equals(p.getContentType()) || !"utf-8".equals(p.getContentEncoding())
                        || p.getDeliveryMode() != 2 || p.getPriority() != 3 || !"corr".equals(p.getCorrelationId())
                        || !"replies".equals(p.getReplyTo()) || !"60000".equals(p.getExpiration())
                        || !STAMP.equals(p.getTimestamp()) || !"kind".equals(p.getType())
                        || !"java-check".equals(p.getAppId()) || !"java-in".equals(env.getExchange())
                        || !"order.created".equals(env.getRoutingKey())) {
                    problem = "properties " + p;
                } else if (!"text".equals(String.valueOf(h.get("s"))) || !Double.valueOf(1.5).equals(h.get("f"))
                        || !Boolean.TRUE.equals(h.get("b")) || !STAMP.equals(h.get("t"))
                        || !"v".equals(String.valueOf(((Map<?, ?>) h.get("nested")).get("k")))
                        || !"[a, 2]".equals(String.valueOf(h.get("list")))) {
                    problem = "headers " + h;
                } else if (!("m" + n).equals(new String(body, StandardCharsets.UTF_8))
                        || !("id-" + n).equals(p.getMessageId())) {
                    problem = "body for " + n;
                }
                getChannel().basicAck(env.getDeliveryTag(), false);
                seen.offer(problem != null ? "!" + problem : p.getMessageId());
            }
        });
        Set<String> ids = new HashSet<>();
        for (int i = 0; i < 10; i++) {
            String id = take(seen, "deliveries");
            if (id.startsWith("!")) fail(id.substring(1));
            ids.add(id);
        }
        if (ids.size() != 10) fail("ids " + ids);
        if (redelivered[0] != 1) fail(redelivered[0] + " redelivered, want 1");
        ch.basicCancel("java-consumer");

        step("passive declare of a missing queue: 404 closes that channel only");
        Channel ch2 = conn.createChannel();
        try {
            ch2.queueDeclarePassive("java-missing-queue");
            fail("passive declare did not fail");
        } catch (IOException e) {
            ShutdownSignalException s = (ShutdownSignalException) e.getCause();
            if (((AMQP.Channel.Close) s.getReason()).getReplyCode() != 404) fail("passive declare: " + s);
        }

        step("basic.get on an empty queue, then a committed transaction");
        Channel ch3 = conn.createChannel();
        if (ch3.basicGet(q, true) != null) fail("get on empty queue");
        ch3.txSelect();
        ch3.basicPublish("", q, null, "tx".getBytes());
        if (ch3.basicGet(q, true) != null) fail("an uncommitted publish was delivered");
        ch3.txCommit();
        GetResponse got = ch3.basicGet(q, false);
        if (got == null || !"tx".equals(new String(got.getBody()))) fail("get after commit");
        ch3.basicAck(got.getEnvelope().getDeliveryTag(), false);

        step("deleting a consumed queue cancels its consumer (consumer_cancel_notify)");
        ch3.queueDeclare("java-side", false, false, false, null);
        BlockingQueue<String> cancels = new ArrayBlockingQueue<>(1);
        ch.basicConsume("java-side", false, "java-side-consumer", new DefaultConsumer(ch) {
            @Override
            public void handleCancel(String tag) {
                cancels.offer(tag);
            }
        });
        ch3.queueDelete("java-side");
        String tag = take(cancels, "basic.cancel");
        if (!tag.equals("java-side-consumer")) fail("cancelled " + tag);

        step("closing the connection from the management API reaches the client as 320");
        closeByName(System.getenv("HTTP_URL"), "java-client-check");
        ShutdownSignalException shutdown = take(closed, "the connection's close");
        Object reason = shutdown.getReason();
        if (!shutdown.isHardError() || shutdown.isInitiatedByApplication()
                || ((AMQP.Connection.Close) reason).getReplyCode() != 320) {
            fail("close: " + shutdown);
        }
        System.out.println("OK");
        System.exit(0);
    }

    // finds the connection by its client-given name and deletes it, as an operator would: the
    // connections' names from the list, then each one's client_properties
    static void closeByName(String base, String name) throws Exception {
        HttpClient http = HttpClient.newHttpClient();
        String auth = "Basic " + Base64.getEncoder().encodeToString("guest:guest".getBytes());
        Pattern connectionName = Pattern.compile("\"connection_name\":\\s*\"" + Pattern.quote(name) + "\"");
        Pattern nameField = Pattern.compile("\"name\":\\s*\"([^\"]+)\"");
        long deadline = System.currentTimeMillis() + 10_000;
        while (System.currentTimeMillis() < deadline) {
            HttpRequest list = HttpRequest.newBuilder(URI.create(base + "/api/connections?columns=name"))
                .header("Authorization", auth).build();
            Matcher names = nameField.matcher(http.send(list, HttpResponse.BodyHandlers.ofString()).body());
            while (names.find()) {
                String path = base + "/api/connections/"
                    + URLEncoder.encode(names.group(1), StandardCharsets.UTF_8).replace("+", "%20");
                HttpRequest one = HttpRequest.newBuilder(URI.create(path)).header("Authorization", auth).build();
                if (!connectionName.matcher(http.send(one, HttpResponse.BodyHandlers.ofString()).body()).find()) {
                    continue;
                }
                HttpRequest delete = HttpRequest.newBuilder(URI.create(path))
                    .header("Authorization", auth).header("X-Reason", "java check").DELETE().build();
                int status = http.send(delete, HttpResponse.BodyHandlers.ofString()).statusCode();
                if (status != 204) fail("DELETE connection: " + status);
                return;
            }
            Thread.sleep(100); // the connection list is a snapshot: not listed yet
        }
        fail("connection " + name + " not listed");
    }
}
