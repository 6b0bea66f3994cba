import Foundation
import Logging
import Workers
import Kafka
import Pipeline
import Operations

/// Upbit's ticker WebSocket (`wss://api.upbit.com/websocket/v1`): what to send on connect.
public enum UpbitTicker {
    public static let url = "wss://api.upbit.com/websocket/v1"

    /// The subscription request, e.g.
    /// `[{"ticket":"…"},{"type":"ticker","codes":["KRW-BTC","KRW-ETH"]},{"format":"DEFAULT"}]`.
    /// DEFAULT is the format whose `code` field keys the records (SIMPLE renames it `cd`).
    public static func subscription(ticket: String, codes: [String]) -> String {
        let list = codes.map(JSONWriter.quoted).joined(separator: ",")
        return #"[{"ticket":\#(JSONWriter.quoted(ticket))},{"type":"ticker","codes":[\#(list)]},{"format":"DEFAULT"}]"#
    }
}

/// Turns WebSocket messages into `prices` records with the parser `pipelinectl produce prices`
/// uses (keyed by market code), and says why a message is not a ticker.
public struct TickerMessages: Sendable {
    public let parser: ProduceParser

    public init(topic: String? = nil) { parser = ProduceParser(stream: .prices, topic: topic) }

    /// The records of one message (an array message gives one per element), or why it is not a ticker:
    /// not JSON, not an object, no market code, or a `type` other than `ticker`.
    public func records(from message: WebSocketMessage, number: Int) -> Result<[ProducerRecord], TickerRejection> {
        let parsed = parser.parseBody(message.bytes, source: "message", line: number)
        if let first = parsed.rejected.first { return .failure(TickerRejection(reason: first.reason)) }
        guard !parsed.records.isEmpty else { return .failure(TickerRejection(reason: "an empty array")) }
        for line in parsed.records {
            guard line.keyed else { return .failure(TickerRejection(reason: "no market code (code or market)")) }
            if let value = line.record.value,
                let object = (try? JSONSerialization.jsonObject(with: Data(value))) as? [String: Any],
                let type = (object["type"] ?? object["ty"]) as? String, type != "ticker"
            {
                return .failure(TickerRejection(reason: "type \(type), not ticker"))
            }
        }
        return .success(parsed.records.map(\.record))
    }
}

public struct TickerRejection: Error, Sendable, Hashable {
    public var reason: String
}

/// `pipelinectl ingest upbit`: follows a ticker feed and produces each ticker, until the feed
/// ends (``WebSocketFeed/stop()``, cancellation, or giving up) or `maxRecords` are enqueued.
/// Closes the producer at the end, so everything enqueued is delivered or counted as failed.
public struct TickerIngest: Sendable {
    public struct Summary: Sendable, Codable, Hashable {
        public var topic: String
        /// WebSocket messages received.
        public var messages = 0
        /// Records delivered.
        public var produced = 0
        /// Records whose delivery failed.
        public var failed = 0
        /// Messages that were not tickers.
        public var rejected = 0
        /// Successful connections; `reconnects` is all but the first.
        public var connections = 0
        public var reconnects = 0
        /// Connection attempts that failed.
        public var connectFailures = 0
        /// Why the feed ended early (the reconnect policy gave up), if it did.
        public var error: String?
    }

    public let feed: WebSocketFeed
    public let messages: TickerMessages
    public let maxRecords: Int?
    public let logger: Logger
    let logLimiter = LogRateLimiter()

    public init(feed: WebSocketFeed, messages: TickerMessages, maxRecords: Int? = nil, logger: Logger) {
        self.feed = feed
        self.messages = messages
        self.maxRecords = maxRecords
        self.logger = logger
    }

    public func run(producer: KafkaProducer, closeDeadline: Duration = .seconds(10)) async -> Summary {
        var summary = Summary(topic: messages.parser.topic)
        // Reports of enqueued records; the stream ends when the producer is closed.
        async let deliveries = countDeliveries(producer.deliveryReports)
        var enqueued = 0
        var unsent = 0
        do {
            feed: for try await event in feed {
                switch event {
                case .connected(let number):
                    summary.connections = number
                    summary.reconnects = number - 1
                    logger.info("connected to \(feed.configuration.endpoint) and subscribed", metadata: ["connection": "\(number)"])
                case .disconnected(let reason, let retryIn):
                    if let suppressed = logLimiter.admit("connection") {
                        logger.warning("connection lost: \(reason); reconnecting in \(Self.format(retryIn))",
                                       metadata: ["suppressed-before": "\(suppressed)"])
                    }
                case .connectFailed(let reason, let retryIn):
                    summary.connectFailures += 1
                    if let suppressed = logLimiter.admit("connection") {
                        logger.warning("cannot connect to \(feed.configuration.endpoint): \(reason); retrying in \(Self.format(retryIn))",
                                       metadata: ["suppressed-before": "\(suppressed)"])
                    }
                case .message(let message):
                    summary.messages += 1
                    switch messages.records(from: message, number: summary.messages) {
                    case .failure(let rejection):
                        summary.rejected += 1
                        if let suppressed = logLimiter.admit("rejected") {
                            logger.warning(
                                "rejected message \(summary.messages) (\(message.kind), \(message.bytes.count) bytes): \(rejection.reason): \(Self.excerpt(message.bytes))",
                                metadata: ["suppressed-before": "\(suppressed)"])
                        }
                    case .success(let records):
                        for record in records {
                            do {
                                _ = try await producer.enqueue(record)
                                enqueued += 1
                            } catch {
                                unsent += 1
                                logger.error("cannot enqueue: \(error)")
                            }
                        }
                        if let maxRecords, enqueued >= maxRecords { break feed }
                    }
                }
            }
        } catch {
            summary.error = "\(error)"
            logger.error("\(error)")
        }
        await producer.close(deadline: closeDeadline)
        let (delivered, failed) = await deliveries
        summary.produced = delivered
        summary.failed = failed + unsent
        return summary
    }

    private func countDeliveries(_ reports: AsyncStream<[DeliveryReport]>) async -> (delivered: Int, failed: Int) {
        var delivered = 0, failed = 0
        for await batch in reports {
            for report in batch {
                guard let error = report.error else {
                    delivered += 1
                    continue
                }
                failed += 1
                if let suppressed = logLimiter.admit("delivery") {
                    logger.error("not delivered: \(error)", metadata: ["suppressed-before": "\(suppressed)"])
                }
            }
        }
        return (delivered, failed)
    }

    static func format(_ d: Duration) -> String { String(format: "%.1f s", d.asSeconds) }

    /// The start of a message for a log line, as text.
    static func excerpt(_ bytes: [UInt8], limit: Int = 120) -> String {
        let text = String(decoding: bytes.prefix(limit), as: UTF8.self)
        return JSONWriter.quoted(text) + (bytes.count > limit ? "…" : "")
    }
}
