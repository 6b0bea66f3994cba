import ArgumentParser
import Dispatch
import Foundation
import Logging
import Pipeline
import Kafka
import Operations

/// `pipelinectl ingest`: follow a live upstream feed into its input topic.
struct Ingest: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Follow a live upstream feed into its input topic.",
        discussion: """
            Examples:
              pipelinectl ingest upbit --codes KRW-BTC,KRW-ETH
              pipelinectl ingest upbit --url ws://127.0.0.1:8765/websocket/v1 --codes KRW-BTC --max-messages 100
            """,
        subcommands: [Upbit.self])

    /// `pipelinectl ingest upbit`: Upbit's ticker WebSocket into prices.raw, keyed by market code.
    struct Upbit: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Follow an Upbit-style ticker WebSocket into prices.raw, keyed by market code.",
            discussion: """
                Connects to --url, sends Upbit's subscription
                ([{"ticket":…},{"type":"ticker","codes":[…]},{"format":"DEFAULT"}]) and produces
                every ticker, text or binary message, to --topic keyed by its market code (the
                `code` field), as `pipelinectl produce prices` keys them. Values are the exact
                message bytes; an array message gives one record per element.

                Pings from the server are answered; the command pings after --ping-interval
                without writing and treats --idle-timeout without reading as a dead connection.
                A dropped or failed connection is retried with exponential backoff and jitter
                (--reconnect-delay doubling up to --max-reconnect-delay) and subscribed again.
                Messages that are not tickers (not JSON, no market code, another type) are
                counted and logged, at most 10 lines per 10 s.

                Runs until SIGINT or SIGTERM (the connection is closed, what was received is
                produced and the producer flushed; a second signal exits at once), --duration or
                --max-messages, then prints a summary: records produced, messages, reconnects,
                rejected. Exit code 4 when messages were rejected, 1 when deliveries failed or
                it gave up reconnecting (--give-up-after).

                Examples:
                  pipelinectl ingest upbit --codes KRW-BTC,KRW-ETH
                  pipelinectl ingest upbit --url ws://127.0.0.1:8765/ --codes KRW-BTC --max-messages 100 --json
                  pipelinectl ingest upbit --codes KRW-BTC --duration 10m --topic prices.capture
                """)

        @Option(help: "The WebSocket URL, ws:// or wss://.") var url = UpbitTicker.url
        @Option(help: "Market codes to subscribe to, comma-separated (e.g. KRW-BTC,KRW-ETH).") var codes: String
        @Option(help: "The topic to produce to.") var topic = UpstreamStream.prices.topic
        @Option(help: "Stop after producing this many records.") var maxMessages: Int?
        @Option(help: "Stop after this long (e.g. 10m). Default: run until SIGINT/SIGTERM.", transform: duration("--duration"))
        var duration: Duration?
        @Option(help: "Ping the server after this long without writing (default: 30s).", transform: duration("--ping-interval"))
        var pingInterval: Duration = .seconds(30)
        @Option(help: "Reconnect after this long without reading anything: a dead connection (default: 75s).", transform: duration("--idle-timeout"))
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

