import ArgumentParser
import Dispatch
import Foundation
import Logging
import Metrics
import Pipeline
import Kafka
import Operations
import Producers
import SafeFetch
import Prometheus
import ServiceLifecycle

/// `pipelinectl ingest`: bring upstream records into their input topics.
struct Ingest: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Bring upstream records into their input topics: a live feed (upbit), an HTTP endpoint (http), list pollers (poll).",
        discussion: """
            Examples:
              pipelinectl ingest upbit --codes KRW-BTC,KRW-ETH
              pipelinectl ingest upbit --url ws://127.0.0.1:8765/websocket/v1 --codes \\
                  KRW-BTC --max-messages 100
              PIPELINE_INGEST_TOKENS='market-backend 3f9c…' pipelinectl ingest http \\
                  --listen 0.0.0.0:8080
              pipelinectl ingest poll products --url \\
                  'https://openmarket.example/api/products' --interval 1m
            """,
        subcommands: [Upbit.self, HTTP.self, Poll.self])

    /// `pipelinectl ingest upbit`: Upbit's ticker WebSocket into prices.raw, keyed by market code.
    struct Upbit: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Follow an Upbit-style ticker WebSocket into prices.raw, keyed by market code.",
            discussion: """
                Connects to --url, sends Upbit's subscription \
                ([{"ticket":…},{"type":"ticker","codes":[…]},{"format":"DEFAULT"}]) and produces \
                every ticker, text or binary message, to --topic keyed by its market code (the \
                `code` field), as `pipelinectl produce prices` keys them. Values are the exact \
                message bytes; an array message gives one record per element.

                Pings from the server are answered; the command pings after --ping-interval \
                without writing and treats --idle-timeout without reading as a dead connection. \
                A dropped or failed connection is retried with exponential backoff and jitter \
                (--reconnect-delay doubling up to --max-reconnect-delay) and subscribed again. \
                Messages that are not tickers (not JSON, no market code, another type) are \
                counted and logged, at most 10 lines per 10 s.

                Runs until SIGINT or SIGTERM (the connection is closed, what was received is \
                produced and the producer flushed; a second signal exits at once), --duration or \
                --max-messages, then prints a summary: records produced, messages, reconnects, \
                rejected. Exit code 4 when messages were rejected, 1 when deliveries failed or \
                it gave up reconnecting (--give-up-after).

                Examples:
                  pipelinectl ingest upbit --codes KRW-BTC,KRW-ETH
                  pipelinectl ingest upbit --url ws://127.0.0.1:8765/ --codes KRW-BTC \\
                      --max-messages 100 --json
                  pipelinectl ingest upbit --codes KRW-BTC --duration 10m --topic \\
                      prices.capture
                """)

        @Option(help: "The WebSocket URL, ws:// or wss://.") var url = UpbitTicker.url
        @Option(help: "Market codes to subscribe to, comma-separated (e.g. KRW-BTC,KRW-ETH).") var codes: String
        @Option(help: "The topic to produce to.") var topic = UpstreamStream.prices.topic
        @Option(help: "Stop after producing this many records.") var maxMessages: Int?
        @Option(help: "Stop after this long (e.g. 10m). Default: run until SIGINT/SIGTERM.", transform: duration("--duration"))
        var duration: Duration?
        @Option(help: "Ping the server after this long without writing (default: 30s).", transform: duration("--ping-interval"))
        var pingInterval: Duration = .seconds(30)
        @Option(help: "Reconnect after this long without reading anything, once a ping went unanswered: a dead connection (default: 75s).", transform: duration("--idle-timeout"))
        var idleTimeout: Duration = .seconds(75)
        @Option(help: "The first reconnect wait, doubled per failure in a row, ±25 % jitter (default: 500ms).", transform: duration("--reconnect-delay"))
        var reconnectDelay: Duration = .milliseconds(500)
        @Option(help: "The longest reconnect wait (default: 30s).", transform: duration("--max-reconnect-delay"))
        var maxReconnectDelay: Duration = .seconds(30)
        @Option(help: "Stop (exit 1) after this many failed connections in a row. Default: never.") var giveUpAfter: Int?
        @Flag(help: "Print the summary as JSON.") var json = false
        @OptionGroup var connection: RequiredConnection
        @OptionGroup var logging: LoggingOptions

        static func duration(_ flag: String) -> @Sendable (String) throws -> Duration {
            { text in
                guard let d = parseDuration(text), d > .zero else { throw ValidationError("\(flag): '\(text)' is not a duration such as 30s or 500ms") }
                return d
            }
        }

        var codeList: [String] { codes.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) } }

        func validate() throws {
            do { _ = try WebSocketEndpoint(url: url) } catch { throw ValidationError("--url: \(error)") }
            if codeList.isEmpty || codeList.contains(where: { $0.isEmpty || $0.contains(" ") }) {
                throw ValidationError("--codes: '\(codes)' is not a comma-separated list of market codes such as KRW-BTC,KRW-ETH")
            }
            if let maxMessages, maxMessages <= 0 { throw ValidationError("--max-messages must be positive") }
            if let giveUpAfter, giveUpAfter <= 0 { throw ValidationError("--give-up-after must be positive") }
            if idleTimeout <= pingInterval {
                throw ValidationError("--idle-timeout (\(idleTimeout)) must be longer than --ping-interval (\(pingInterval)), or every quiet spell drops the connection")
            }
            if maxReconnectDelay < reconnectDelay { throw ValidationError("--max-reconnect-delay must not be shorter than --reconnect-delay") }
        }

        func feedConfiguration() throws -> WebSocketFeed.Configuration {
            var configuration = WebSocketFeed.Configuration(
                endpoint: try WebSocketEndpoint(url: url),
                subscription: [UpbitTicker.subscription(ticket: UUID().uuidString.lowercased(), codes: codeList)])
            configuration.pingInterval = pingInterval
            configuration.idleTimeout = idleTimeout
            configuration.reconnect.initialDelay = reconnectDelay
            configuration.reconnect.maximumDelay = maxReconnectDelay
            configuration.reconnect.maxAttempts = giveUpAfter
            return configuration
        }

        func run() async throws {
            try Preflight.checkRuntime()
            let logger = logging.bootstrap(label: "pipelinectl.ingest")
            let feed = WebSocketFeed(configuration: try feedConfiguration())
            let producer = try KafkaProducer(configuration: ProducerConfiguration(kafka: connection.kafka), logger: logger)
            let signals = StopSignal(secondSignal: "exiting now", onFirst: { sig in
                logger.info("signal \(sig): closing the connection, producing what was received (a second signal exits at once)")
                feed.stop()
            })
            signals.install()
            let ingest = TickerIngest(feed: feed, messages: TickerMessages(topic: topic), maxRecords: maxMessages, logger: logger)
            let duration = self.duration
            let summary = await withTaskGroup(of: TickerIngest.Summary?.self) { group in
                group.addTask { await ingest.run(producer: producer) }
                if let duration {
                    group.addTask {
                        try? await Task.sleep(for: duration)
                        if !Task.isCancelled { feed.stop() }
                        return nil
                    }
                }
                var summary: TickerIngest.Summary?
                for await result in group {
                    guard let result else { continue }
                    summary = result
                    group.cancelAll()  // the --duration timer
                }
                return summary!
            }
            if json {
                try printJSON(summary)
            } else {
                print("produced \(summary.produced) records to \(summary.topic) from \(summary.messages) messages; rejected \(summary.rejected) messages")
                print("connections \(summary.connections) (reconnects \(summary.reconnects)), failed connection attempts \(summary.connectFailures)")
                if summary.failed > 0 { print("failed to deliver \(summary.failed) records") }
                if let error = summary.error { print("stopped: \(error)") }
            }
            if summary.failed > 0 || summary.error != nil { throw ExitCode(Exit.failure) }
            if summary.rejected > 0 { throw ExitCode(Exit.partial) }
        }
    }
}


extension Ingest {
    /// Runs a producer service with its metrics endpoint until a signal (or the service ends),
    /// then closes the producers, delivering what they hold within `shutdownDeadline`.
    static func run(
        _ services: [ServiceGroupConfiguration.ServiceConfiguration], producers: ProducerSlot, signals: WorkerSignals,
        shutdownDeadline: Duration, logger: Logger
    ) async throws {
        let group = ServiceGroup(configuration: .init(services: services, logger: logger))
        signals.attach(logger: logger) { Task { await group.triggerGracefulShutdown() } }
        do {
            try await group.run()
        } catch {
            await producers.close(deadline: shutdownDeadline)
            throw error
        }
        await producers.close(deadline: shutdownDeadline)
    }

    /// `pipelinectl ingest http`: the endpoint the apps' backends post their events to.
    struct HTTP: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "http",
            abstract: "Serve POST /v1/{stream}: validate posted upstream records and produce them, answering once they are durable.",
            discussion: """
                Streams: prices, products, campaigns, hangouts, challenges (to <stream>.raw, or \
                --topic STREAM=TOPIC). A body is one upstream JSON object, an array of them, or \
                JSON lines; a record may be an envelope {"key","headers","timestamp","value"} as \
                `pipelinectl produce` reads, to set its key, headers or time ("value": null is a \
                tombstone). Every record is checked by the decoder of its stream's decode stage \
                first: if one is invalid the answer is 400 with each invalid record's index, \
                field and reason, and nothing is produced. Otherwise the records are produced \
                (acks=all, idempotent producer, keyed as `pipelinectl produce` keys them) and the \
                answer, 201 with each record's partition and offset, comes once the broker has \
                acknowledged all of them: a 2xx answer means durable. If the broker does not \
                acknowledge them within --delivery-timeout, or the producer holds \
                --max-in-flight-records already, the answer is 503 with Retry-After.

                Clients authenticate with a bearer token (401 without a known one; 403 for a \
                stream their line does not list). Tokens come from --token-file or \
                $PIPELINE_INGEST_TOKENS, never from a flag: one client per line, \
                `NAME TOKEN [STREAM,…]`, tokens of at least 16 characters. An Idempotency-Key \
                header makes a retried post produce nothing new: an answered key gets the same \
                answer again; a key whose post failed part-way produces only the records not yet \
                durable. Limits: --max-body-bytes and --max-records (413), --rate-limit requests \
                per second per client (429 with Retry-After); a connection silent for \
                --idle-timeout is closed, and a request not whole within --request-timeout gets 408.

                Metrics (pipeline_ingest_requests_total, pipeline_ingest_records_total, \
                pipeline_ingest_request_seconds) and /healthz, /readyz on --metrics-address. \
                SIGTERM or SIGINT: stop accepting, answer the posts in flight, flush, exit.

                Examples:
                  pipelinectl ingest http --token-file /etc/pipeline/ingest-tokens --listen \\
                      0.0.0.0:8080
                  curl -H "Authorization: Bearer $TOKEN" -H 'Idempotency-Key: post-7781' \\
                    --data-binary @products.jsonl http://127.0.0.1:8080/v1/products
                """)

        @Option(help: "Where to listen (host:port; port 0 picks a free one, logged at start).") var listen = "127.0.0.1:8080"
        @Option(help: "The client token file (NAME TOKEN [STREAM,…] per line). Default: $PIPELINE_INGEST_TOKENS.") var tokenFile: String?
        @Option(help: "A larger body is answered 413.") var maxBodyBytes = 1 << 20
        @Option(help: "More records in one body are answered 413.") var maxRecords = 1_000
        @Option(help: "Records handed to the producer and not yet acknowledged; a post that would pass it gets 503.") var maxInFlightRecords = 50_000
        @Option(help: "Requests per second per client (bursts of the same size); 429 above it.") var rateLimit: Double = 100
        @Option(help: """
            Close a connection that sends nothing for this long, between requests or in the middle of one; one whose \
            request is being answered stays (default: 75s). Keep proxies' and clients' pools idling out sooner.
            """, transform: Upbit.duration("--idle-timeout"))
        var idleTimeout: Duration = .seconds(75)
        @Option(help: """
            A request not whole within this long of its first byte (a head or body trickled in) gets 408 and its \
            connection closed (default: 30s).
            """, transform: Upbit.duration("--request-timeout"))
        var requestTimeout: Duration = .seconds(30)
        @Option(help: "How long an Idempotency-Key is remembered (default: 1h).", transform: Upbit.duration("--idempotency-window"))
        var idempotencyWindow: Duration = .seconds(3600)
        @Option(help: "How many Idempotency-Keys are remembered (the oldest is forgotten first).") var idempotencyCapacity = 100_000
        @Option(help: """
            The compacted topic through which every replica shares its Idempotency-Keys, read before serving (created if \
            missing); 'none' keeps them in this process only.
            """)
        var idempotencyTopic = "pipeline.ingest-idempotency"
        @Option(help: "How long the broker has to acknowledge a record (the producer's message.timeout.ms; default: 10s); then 503.", transform: Upbit.duration("--delivery-timeout"))
        var deliveryTimeout: Duration = .seconds(10)
        @Option(help: """
            How long the producer waits for more records to share a request (linger.ms, 0ms to 900s; default: 1ms). \
            Every answer waits for it: longer sends fewer, larger requests.
            """, transform: { text in
                guard let d = parseDuration(text), d <= .seconds(900) else {
                    throw ValidationError("--linger: '\(text)' is not a duration from 0ms to 900s such as 1ms")
                }
                return d
            })
        var linger: Duration = .milliseconds(1)
        @Option(help: "The topic of a stream, STREAM=TOPIC (repeatable; default <stream>.raw).") var topic: [String] = []
        @Option(help: """
            Event-loop threads serving the posts, 1 to 256 (default: one less than the cores, at least 1; \
            librdkafka's threads take the rest).
            """)
        var eventLoops: Int?
        @Option(help: "Address of /metrics, /healthz and /readyz (host:port; port 0 picks a free one, logged at start).")
        var metricsAddress = "0.0.0.0:9465"
        @Option(name: .customShort("X"), parsing: .singleValue, help: """
            Raw librdkafka property key=value for the service's producer (repeatable). It keeps one request \
            in flight per connection (max.in.flight.requests.per.connection=1) unless this sets it.
            """)
        var properties: [String] = []
        @Option(help: "Graceful shutdown deadline (default: 30s).", transform: Upbit.duration("--shutdown-deadline"))
        var shutdownDeadline: Duration = .seconds(30)
        @OptionGroup var connection: RequiredConnection
        @OptionGroup var logging: LoggingOptions

        func listenAddress() throws -> (host: String, port: Int) { try parseListen(listen, example: "127.0.0.1:8080") }

        func topics() throws -> [UpstreamStream: String] {
            var topics = IngestHTTPSettings().topics
            for pair in topic {
                let parts = pair.split(separator: "=", maxSplits: 1).map(String.init)
                guard parts.count == 2, let stream = UpstreamStream(rawValue: parts[0]), !parts[1].isEmpty else {
                    throw ValidationError("--topic: '\(pair)' is not STREAM=TOPIC with STREAM one of \(UpstreamStream.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                topics[stream] = parts[1]
            }
            return topics
        }

        func tokens() throws -> ClientTokens {
            do {
                if let tokenFile {
                    guard let text = try? String(contentsOfFile: tokenFile, encoding: .utf8) else {
                        throw ValidationError("--token-file: cannot read '\(tokenFile)'")
                    }
                    return try ClientTokens(parsing: text, source: tokenFile)
                }
                guard let text = ProcessInfo.processInfo.environment["PIPELINE_INGEST_TOKENS"], !text.isEmpty else {
                    throw ValidationError("no client tokens: give --token-file or set PIPELINE_INGEST_TOKENS (one client per line: NAME TOKEN [STREAM,…])")
                }
                return try ClientTokens(parsing: text, source: "$PIPELINE_INGEST_TOKENS")
            } catch let error as ClientTokens.ParseError {
                throw ValidationError(error.description)
            }
        }

        func validate() throws {
            _ = try listenAddress()
            _ = try topics()
            if maxBodyBytes <= 0 { throw ValidationError("--max-body-bytes must be positive") }
            if maxRecords <= 0 { throw ValidationError("--max-records must be positive") }
            if maxInFlightRecords < maxRecords { throw ValidationError("--max-in-flight-records (\(maxInFlightRecords)) must hold at least --max-records (\(maxRecords))") }
            if !(rateLimit > 0) { throw ValidationError("--rate-limit must be a positive number of requests per second") }
            if idempotencyCapacity <= 0 { throw ValidationError("--idempotency-capacity must be positive") }
            if requestTimeout <= .zero { throw ValidationError("--request-timeout must be positive, not \(requestTimeout)") }
            if let eventLoops, !(1...256).contains(eventLoops) { throw ValidationError("--event-loops must be from 1 to 256, not \(eventLoops)") }
            _ = try parseProperties(properties)
        }

        func run() async throws {
            let signals = WorkerSignals.install(escalateAfter: shutdownDeadline + .seconds(5))
            try Preflight.checkRuntime()
            let tokens = try tokens()
            let logger = logging.bootstrap(label: "pipelinectl.ingest")
            let health = IngestHealth()
            let endpoint = try metricsEndpoint(metricsAddress, health: health, logger: logger)
            // 1 ms, not librdkafka's 5: a client waits for its records' acknowledgement, and under
            // load the records of concurrent posts still share requests. It costs CPU (librdkafka's
            // I/O thread polls while a partition's request waits): BENCHMARKS.md, "Ingest endpoint".
            var kafka = connection.kafka
            kafka.raw = try parseProperties(properties)
            // One request in flight per connection, not librdkafka's 5: an idempotent producer
            // sends a partition's next request only after the last one is acknowledged, and with 5
            // allowed its I/O thread polls without a timeout meanwhile; with 1 the next request
            // waits in the send queue and the thread sleeps (a fifth to two fifths less CPU per
            // record: BENCHMARKS.md, "Ingest endpoint"). A broker that lost the producer's id is
            // then seen in the producer's statistics (ProducerSlot).
            if kafka.raw["max.in.flight.requests.per.connection"] == nil { kafka.raw["max.in.flight.requests.per.connection"] = "1" }
            var settings = IngestHTTPSettings()
            (settings.host, settings.port) = try listenAddress()
            settings.maxBodyBytes = maxBodyBytes
            settings.maxRecords = maxRecords
            if let raw = kafka.raw["message.max.bytes"] {
                guard let bytes = Int(raw), bytes > 0 else { throw ValidationError("-X message.max.bytes=\(raw): expected a positive number of bytes") }
                settings.maxRecordBytes = bytes
            }
            settings.maxInFlightRecords = maxInFlightRecords
            settings.requestsPerSecond = rateLimit
            settings.idleTimeout = idleTimeout
            settings.requestTimeout = requestTimeout
            if let eventLoops { settings.eventLoops = eventLoops }
            settings.idempotencyWindow = idempotencyWindow
            settings.idempotencyCapacity = idempotencyCapacity
            if idempotencyTopic != "none" { settings.idempotencyTopic = IdempotencyTopic(topic: idempotencyTopic, kafka: connection.kafka) }
            settings.topics = try topics()
            // The producers serve their delivery reports on the posts' event loop, which is
            // shut down only after they are closed (closing waits for the last reports).
            let (loops, serving) = IngestHTTPService.makeEventLoops(settings)
            do {
                let producers = try ProducerSlot.durable(kafka: kafka, deliveryTimeout: deliveryTimeout, linger: linger, serving: serving, logger: logger)
                let service = IngestHTTPService(
                    settings: settings, tokens: tokens, producers: producers, health: health, eventLoops: loops, logger: logger)
                logger.info("ingest clients: \(tokens.clients.map(\.name).joined(separator: ", "))")
                try await Ingest.run([.init(service: endpoint), .init(service: service)], producers: producers, signals: signals,
                                     shutdownDeadline: shutdownDeadline, logger: logger)
            } catch {
                try? await loops.shutdownGracefully()
                throw error
            }
            try? await loops.shutdownGracefully()
        }
    }
}


extension Ingest {
    /// `pipelinectl ingest poll SOURCE`: an upstream list API, polled, only its changes produced.
    struct Poll: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Poll an upstream list API every --interval and produce only the records that changed.",
            discussion: """
                Sources and their paging (../shared/docs/formats.md):
                  campaigns   Bigwalk's campaign list, a bare JSON array (page from 0, size)
                  products    the open market's product list, either era (page_no=N, hasNext/has_next)
                  hangouts    Bappy's hangout list; put {page} in --url where the page number
                              goes (from 0): …/hangout/list/{page}?hangoutSort=Newest
                  challenges  iGoMoney's challenges/notstarted (lastId, first above every id:
                              the server's default is 10; pageSize)
                Each listed item is produced to <stream>.raw (or --topic) as its exact bytes, \
                keyed as `pipelinectl produce` keys it, only when its content hash differs from \
                the last one produced for its key. What was produced is kept in a compacted \
                topic (--state-topic, default pipeline.poll-state.<source>; created if missing), \
                so a restart, on this host or another, does not produce the catalogue again. \
                With --tombstones, a key a complete listing no longer has gets a tombstone \
                (event-type: deleted); without it, nothing.

                Requests: If-None-Match / If-Modified-Since when the server sent an ETag / \
                Last-Modified; --timeout per attempt; --retries on timeouts, failed connections, \
                429 and 5xx, with exponential backoff and jitter; --rate-limit requests per \
                second per host; private, loopback and metadata addresses refused unless \
                --allow-network lists them (as the thumbnail fetcher). A page that fails or does \
                not parse is logged with its URL and status and counted; the poller goes on.

                Metrics (pipeline_poll_*) and /healthz, /readyz on --metrics-address; /readyz
                fails after --readiness-timeout without a successful poll. SIGTERM or SIGINT:
                the poll under way finishes, then the poller exits.

                Examples:
                  pipelinectl ingest poll campaigns --url \\
                      https://api.bigwalk.example/api/campaigns/category/1/story --interval 5m
                  pipelinectl ingest poll hangouts --url \\
                      'https://bappy.example/hangout/list/{page}?hangoutSort=Newest'
                  pipelinectl ingest poll challenges --once --url \\
                    'https://api.igomoney.example/challenges/notstarted?categoryId=-1'
                """)

        @Argument(help: "campaigns, products, hangouts or challenges.") var source: String
        @Option(help: "The list endpoint, http(s)://.") var url: String
        @Option(help: "Time between polls (default: 60s).", transform: Upbit.duration("--interval")) var interval: Duration = .seconds(60)
        @Flag(help: "Poll once, print the summary and exit (exit 1 when the poll failed).") var once = false
        @Option(help: "The topic to produce to (default: <stream>.raw).") var topic: String?
        @Option(help: "The compacted topic of what was produced (default: pipeline.poll-state.<source>).") var stateTopic: String?
        @Option(help: "Items per page asked for, where the API takes a page size.") var pageSize = 100
        @Option(help: "Read at most this many pages per poll (a longer listing is never complete).") var maxPages = 1_000
        @Flag(help: "Produce a tombstone for a key a complete listing no longer has.") var tombstones = false
        @Option(help: "Requests per second to one host.") var rateLimit: Double = 2
        @Option(help: "Time allowed for one request attempt, redirects included (default: 30s).", transform: Upbit.duration("--timeout"))
        var timeout: Duration = .seconds(30)
        @Option(help: "Attempts per page after the first, on timeouts, failed connections, 429 and 5xx.") var retries = 3
        @Option(help: "The largest page accepted, in bytes.") var maxPageBytes = 20_000_000
        @Option(name: .customLong("allow-network"), help: "Also allow this private network (CIDR, e.g. 10.1.0.0/16 or 127.0.0.1/32; repeatable).")
        var allowNetworks: [String] = []
        @Option(help: "/readyz fails after this long without a successful poll (default: 5m, at least --interval).", transform: Upbit.duration("--readiness-timeout"))
        var readinessTimeout: Duration?
        @Option(help: "Address of /metrics, /healthz and /readyz (host:port; port 0 picks a free one, logged at start).")
        var metricsAddress = "0.0.0.0:9466"
        @Option(help: "How long the broker has to acknowledge a record (default: 30s).", transform: Upbit.duration("--delivery-timeout"))
        var deliveryTimeout: Duration = .seconds(30)
        @Option(help: "Graceful shutdown deadline (default: 30s).", transform: Upbit.duration("--shutdown-deadline"))
        var shutdownDeadline: Duration = .seconds(30)
        @Flag(help: "With --once: print the summary as JSON.") var json = false
        @OptionGroup var connection: RequiredConnection
        @OptionGroup var logging: LoggingOptions

        func pollSource() throws -> PollSource {
            guard let source = PollSource(rawValue: source) else {
                throw ValidationError("unknown source '\(source)'; sources: \(PollSource.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return source
        }

        func networks() throws -> [IPNetwork] {
            try allowNetworks.map { text in
                guard let network = IPNetwork(text) else { throw ValidationError("--allow-network: '\(text)' is not a network such as 10.0.0.0/8 or 127.0.0.1/32") }
                return network
            }
        }

        var effectiveReadinessTimeout: Duration { readinessTimeout ?? max(.seconds(300), interval * 3) }

        func validate() throws {
            let source = try pollSource()
            do { _ = try source.firstPage(url: url, pageSize: pageSize) } catch { throw ValidationError("--url: \(error.reason)") }
            _ = try networks()
            if pageSize <= 0 { throw ValidationError("--page-size must be positive") }
            if maxPages <= 0 { throw ValidationError("--max-pages must be positive") }
            if !(rateLimit > 0) { throw ValidationError("--rate-limit must be a positive number of requests per second") }
            if retries < 0 { throw ValidationError("--retries must not be negative") }
            if maxPageBytes <= 0 { throw ValidationError("--max-page-bytes must be positive") }
            if let readinessTimeout, readinessTimeout < interval {
                throw ValidationError("--readiness-timeout (\(readinessTimeout)) must not be shorter than --interval (\(interval)), or the poller is unready between two good polls")
            }
            if json && !once { throw ValidationError("--json prints the summary of --once; add --once") }
        }

        func run() async throws {
            let signals = WorkerSignals.install(escalateAfter: shutdownDeadline + .seconds(5))
            try Preflight.checkRuntime()
            let logger = logging.bootstrap(label: "pipelinectl.ingest.poll")
            let health = PollHealth(readinessTimeout: effectiveReadinessTimeout)
            let endpoint = try metricsEndpoint(metricsAddress, health: health, logger: logger)
            var settings = PollSettings(source: try pollSource(), url: url, topic: topic, stateTopic: stateTopic)
            settings.interval = interval
            settings.once = once
            settings.pageSize = pageSize
            settings.maxPages = maxPages
            settings.tombstones = tombstones
            settings.requestsPerSecond = rateLimit
            let fetch = FetchConfiguration(
                connectTimeout: min(timeout, .seconds(10)), readTimeout: timeout, attemptTimeout: timeout,
                maxBytes: maxPageBytes, maxAttempts: retries + 1, destinations: DestinationPolicy(allowList: try networks()),
                userAgent: "pipelinectl-ingest-poll/1")
            let producers = try ProducerSlot.durable(kafka: connection.kafka, deliveryTimeout: deliveryTimeout, logger: logger)
            let poller = Poller(
                settings: settings, fetcher: SafeFetcher(configuration: fetch, logger: logger), producers: producers,
                kafka: connection.kafka, health: health, logger: logger)
            try await Ingest.run(
                [.init(service: endpoint), .init(service: poller, successTerminationBehavior: .gracefullyShutdownGroup)],
                producers: producers, signals: signals, shutdownDeadline: shutdownDeadline, logger: logger)
            guard once, let summary = poller.lastSummary else { return }
            if json {
                try printJSON(summary)
            } else {
                print("pages \(summary.pages) (not modified \(summary.notModified)), items \(summary.seen), changed \(summary.changed), produced \(summary.produced), tombstoned \(summary.tombstoned), failed \(summary.failed)\(summary.complete ? "" : ", listing incomplete")")
                for error in summary.errors { print("error: \(error)") }
            }
            if !summary.succeeded { throw ExitCode(Exit.failure) }
        }
    }
}

/// `--listen host:port` of a server command; the message names the flag and shows `example`.
func parseListen(_ listen: String, example: String) throws -> (host: String, port: Int) {
    guard let colon = listen.lastIndex(of: ":"), let port = Int(listen[listen.index(after: colon)...]), (0...65535).contains(port),
        colon > listen.startIndex
    else {
        let any = example.split(separator: ":")[0] + ":0"
        throw ValidationError("--listen: '\(listen)' is not host:port (e.g. \(example), or \(any) for any free port)")
    }
    return (String(listen[..<colon]), port)
}
