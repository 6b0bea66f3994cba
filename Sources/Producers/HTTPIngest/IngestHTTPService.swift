import Foundation
import HTTPServing
import Kafka
import Logging
import Metrics
import NIOCore
import NIOHTTP1
import NIOPosix
import Operations
import Pipeline
import ServiceLifecycle
import Synchronization

/// Settings of `pipelinectl ingest http` (each is a flag of the command).
public struct IngestHTTPSettings: Sendable {
    public var host = "127.0.0.1"
    public var port = 8080
    /// A larger body is answered 413 before it is read.
    public var maxBodyBytes = 1 << 20
    /// More records in one body are answered 413.
    public var maxRecords = 1_000
    /// The largest record the producer sends (its `message.max.bytes`): a body with a larger one
    /// is answered 400 naming it, before anything of the body is produced.
    public var maxRecordBytes = IngestBatch.defaultMaxRecordBytes
    /// Records handed to the producer and not yet acknowledged; a post that would pass it is
    /// answered 503 with `Retry-After` instead of holding its records in memory.
    public var maxInFlightRecords = 50_000
    /// Requests per second per client (token bucket; bursts of the same size); 429 above it.
    public var requestsPerSecond = 100.0
    /// A connection that sends nothing for this long, between requests or in the middle of one
    /// (a body announced and not sent), is closed; one whose request is being answered is not.
    /// Without it, silent connections would hold their sockets and handlers for good. Longer than
    /// the 60 s after which common proxies (nginx's upstream keep-alive, load balancers) drop an
    /// idle connection, so that they close first and never send a request into our close.
    public var idleTimeout: Duration = .seconds(75)
    /// A request must be whole within this long of its first byte (408 and the close): a head
    /// or body trickled in, a byte before each idle timeout, would hold its connection for good.
    public var requestTimeout: Duration = .seconds(30)
    /// NIO event-loop threads serving the posts (each post is parsed, submitted and answered on
    /// its connection's loop). One less than the cores, at least one: librdkafka's broker
    /// threads take the rest of a post's CPU, and on 2 cores one loop used a sixth less CPU per
    /// record than two (BENCHMARKS.md, "Ingest endpoint").
    public var eventLoops = max(1, System.coreCount - 1)
    /// How long and how many `Idempotency-Key`s are remembered.
    public var idempotencyWindow: Duration = .seconds(3600)
    public var idempotencyCapacity = 100_000
    /// The compacted topic every replica shares its keys through (nil: this process only).
    public var idempotencyTopic: IdempotencyTopic?
    /// The topic of each stream (default: the topology's `<stream>.raw`).
    public var topics: [UpstreamStream: String] = Dictionary(uniqueKeysWithValues: UpstreamStream.allCases.map { ($0, $0.topic) })

    public init() {}
}

/// `POST /v1/{stream}`: the apps' backends post upstream records, which are validated by the
/// stream's decoder, produced with `acks=all`, and answered once the broker has acknowledged
/// them, so that a 2xx answer means durable.
///
/// Answers (JSON bodies):
/// - 201 `{"accepted":n,"records":[{"index","topic","partition","offset"}]}`;
/// - 400 `{"error","rejected":[{"index","field","reason","detail"}]}`: a record is invalid;
///   nothing of the request was produced (fix and send the whole body again);
/// - 401 (no or unknown bearer token; one answer for both), 403 (the token may not post to this
///   stream), 404 (no such stream), 409 (the same `Idempotency-Key` is being handled), 413 (body
///   or record count over the limit), 422 (an `Idempotency-Key` reused with another body), 429
///   (rate limit; `Retry-After`);
/// - 503 with `Retry-After`: the producer's queue is full, or the broker did not acknowledge
///   every record within the producer's `message.timeout.ms`; the body lists which records
///   are durable. Retried with the same `Idempotency-Key`, only the others are produced.
///
/// A retried post with an `Idempotency-Key` the service has answered gets the same answer
/// (header `Idempotent-Replayed: true`) and produces nothing.
public final class IngestHTTPService: Service, Sendable {
    public let settings: IngestHTTPSettings
    let tokens: ClientTokens
    let producers: ProducerSlot
    let validator: IngestValidator
    let health: IngestHealth
    let logger: Logger
    let limiter: RateLimiter
    let idempotency: IdempotencyWindow
    /// The keys shared with the other replicas (``IngestHTTPSettings/idempotencyTopic``).
    let shared: SharedIdempotency?
    /// The event loops the posts are served on, when the caller owns them (and shuts them down
    /// after the producers are closed): its producers then serve their delivery reports on one.
    let eventLoops: MultiThreadedEventLoopGroup?
    let metrics = StreamMetrics.make()

    /// `eventLoops`: the loops to serve on (``IngestHTTPSettings/eventLoops`` of them), made by
    /// the caller so that the producers can serve their reports on one
    /// (``IngestHTTPService/makeEventLoops(_:)``); nil makes them here for the time `run` runs.
    public init(
        settings: IngestHTTPSettings, tokens: ClientTokens, producers: ProducerSlot, validator: IngestValidator = IngestValidator(),
        health: IngestHealth, eventLoops: MultiThreadedEventLoopGroup? = nil, logger: Logger
    ) {
        self.eventLoops = eventLoops
        self.settings = settings
        self.tokens = tokens
        self.producers = producers
        self.validator = validator
        self.health = health
        self.logger = logger
        self.limiter = RateLimiter(perSecond: settings.requestsPerSecond)
        self.idempotency = IdempotencyWindow(capacity: settings.idempotencyCapacity, window: settings.idempotencyWindow)
        do {
            shared = try settings.idempotencyTopic.map { [idempotency] in try SharedIdempotency(topic: $0, window: idempotency, logger: logger) }
        } catch {
            // Served all the same: keys are then known to this process only, and it says so.
            logger.warning("the shared Idempotency-Keys cannot be used; keys are remembered by this process only", metadata: ["error": "\(error)"])
            shared = nil
        }
    }

    public func run() async throws {
        // The keys every replica (and this service before a restart) answered: read before the
        // first request is served, then followed.
        do {
            try await shared?.start()
        } catch {
            // Served all the same: a key is then known to this process, and shared from here on.
            logger.warning("the shared Idempotency-Keys could not be read; keys answered before are not known here", metadata: ["error": "\(error)"])
        }
        let group = eventLoops ?? MultiThreadedEventLoopGroup(numberOfThreads: settings.eventLoops)
        let server = RequestServer(
            host: settings.host, port: settings.port, idleTimeout: settings.idleTimeout, requestTimeout: settings.requestTimeout, group: group,
            onListening: { [self] port in
                health.listening()
                logger.info("ingest endpoint listening on \(settings.host):\(port)", metadata: ["port": "\(port)"])
            },
            route: { [self] head in route(head) })
        // Graceful shutdown: the server stops accepting and answers the posts it has (each
        // waits for its acknowledgements, bounded by the producer's message.timeout.ms).
        var failure: (any Error)?
        do {
            try await withGracefulShutdownHandler {
                try await server.run()
            } onGracefulShutdown: { [health] in
                health.stopping()
            }
        } catch {
            failure = error
        }
        if eventLoops == nil { try? await group.shutdownGracefully() }
        await shared?.stop()
        if let failure { throw failure }
    }

    /// The event loops for ``IngestHTTPSettings/eventLoops``, and how a producer serves its
    /// delivery reports on the first of them: a post's handler runs on its connection's loop
    /// and awaits its reports there, so with one loop (the default on 2 cores) no thread is
    /// woken between the broker's acknowledgement and the answer.
    public static func makeEventLoops(_ settings: IngestHTTPSettings) -> (MultiThreadedEventLoopGroup, DeliveryReportServing) {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: settings.eventLoops)
        let loop = group.next()
        return (group, .scheduled { job in loop.execute(job) })
    }

    // MARK: One request

    /// What a request gets once its head is read: every answer that needs no body is given
    /// here, before the body is read; a post that may go on reads its body (up to
    /// `--max-body-bytes`) and is answered by ``answer(_:_:)``.
    func route(_ head: HTTPRequestHead) -> RequestRoute {
        let started = ContinuousClock.now
        let path = head.uri.prefix { $0 != "?" }
        let parts = path.split(separator: "/")
        guard parts.count == 2, parts[0] == "v1" else {
            return .answer(finish(nil, started, Self.json(404, ErrorBody(error: "no such path; post records to /v1/{stream}"))))
        }
        let name = String(parts[1])
        let stream = UpstreamStream(rawValue: name)
        guard head.method == .POST else {
            // Any other method on a stream's path: 405, naming the one that works.
            return .answer(finish(stream, started, Self.json(405, ErrorBody(error: "only POST is served here"), headers: [("Allow", "POST")])))
        }
        switch admit(head, stream: stream, name: name) {
        case .failure(let refusal):
            return .answer(finish(stream, started, refusal.response))
        case .success(let post):
            return .readBody(
                limit: settings.maxBodyBytes,
                tooLarge: { [self] in
                    finish(post.stream, started, Self.json(413, ErrorBody(error: "the body is over \(settings.maxBodyBytes) bytes (--max-body-bytes)")))
                },
                handler: { [self] body in finish(post.stream, started, await answer(post, body)) })
        }
    }

    /// Counts and times an answer.
    private func finish(_ stream: UpstreamStream?, _ started: ContinuousClock.Instant, _ response: ServerResponse) -> ServerResponse {
        let elapsed = ContinuousClock.now - started
        if let stream, let handles = metrics[stream] {
            if response.status.code == 201 { handles.created.increment() } else { Self.countRequest(stream.rawValue, response) }
            handles.seconds.record(duration: elapsed)
        } else {
            Self.countRequest(stream?.rawValue ?? "unknown", response)
            Timer(label: IngestMetricName.requestSeconds, dimensions: [("stream", stream?.rawValue ?? "unknown")]).record(duration: elapsed)
        }
        return response
    }

    private static func countRequest(_ stream: String, _ response: ServerResponse) {
        Counter(label: IngestMetricName.requests, dimensions: [("stream", stream), ("code", String(response.status.code))]).increment()
    }

    /// The metrics every accepted post updates, made once per stream: making a handle goes
    /// through the metrics factory (a lock, the name checked, the labels hashed) each time.
    struct StreamMetrics: Sendable {
        let created: Counter
        let seconds: Timer
        let accepted: Counter

        /// Each stream's (the factory must be bootstrapped first).
        static func make() -> [UpstreamStream: StreamMetrics] {
            Dictionary(uniqueKeysWithValues: UpstreamStream.allCases.map { stream in
                (stream, StreamMetrics(
                    created: Counter(label: IngestMetricName.requests, dimensions: [("stream", stream.rawValue), ("code", "201")]),
                    seconds: Timer(label: IngestMetricName.requestSeconds, dimensions: [("stream", stream.rawValue)]),
                    accepted: Counter(label: IngestMetricName.records, dimensions: [("stream", stream.rawValue), ("outcome", "accepted")])))
            })
        }
    }

    /// A post that may be read: who sent it, where it goes, its key.
    struct Post: Sendable {
        var client: ClientTokens.Client
        var stream: UpstreamStream
        var idempotencyKey: String?
    }

    struct Refusal: Error {
        var response: ServerResponse
    }

    /// The checks that need only the head, in the order a client should fix them.
    private func admit(_ head: HTTPRequestHead, stream: UpstreamStream?, name: String) -> Result<Post, Refusal> {
        func refuse(_ status: Int, _ error: String, headers: [(String, String)] = []) -> Result<Post, Refusal> {
            .failure(Refusal(response: Self.json(status, ErrorBody(error: error), headers: headers)))
        }
        // Fields that must be one: with two, which would win is a guess a client cannot see.
        for name in ["Authorization", "Idempotency-Key"] where head.headers[name].count > 1 {
            return refuse(400, "more than one \(name) header")
        }
        guard let client = tokens.client(authorization: head.headers.first(name: "authorization")) else {
            return refuse(401, "missing or invalid bearer token", headers: [("WWW-Authenticate", #"Bearer realm="ingest""#)])
        }
        guard let stream else {
            return refuse(404, "no stream '\(name)'; streams: \(UpstreamStream.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        guard client.mayPost(to: stream) else {
            return refuse(403, "this token may not post to \(stream.rawValue)")
        }
        if let wait = limiter.admit(client.name) {
            return refuse(429, "more than \(settings.requestsPerSecond) requests per second", headers: [("Retry-After", Self.seconds(wait))])
        }
        let idempotencyKey = head.headers.first(name: "idempotency-key")
        if let key = idempotencyKey, key.isEmpty || key.utf8.count > 255 || key.utf8.contains(where: { $0 < 0x21 || $0 > 0x7E }) {
            return refuse(400, "Idempotency-Key must be 1 to 255 visible ASCII characters")
        }
        // The body, bounded before it is read (and by the server while it is).
        if let length = head.headers.first(name: "content-length").flatMap(Int.init), length > settings.maxBodyBytes {
            return refuse(413, "the body is \(length) bytes; at most \(settings.maxBodyBytes) (--max-body-bytes)")
        }
        return .success(Post(client: client, stream: stream, idempotencyKey: idempotencyKey))
    }

    /// A post whose body has been read: parsed, produced, answered once durable.
    private func answer(_ post: Post, _ body: [UInt8]) async -> ServerResponse {
        let (client, stream, idempotencyKey) = (post.client, post.stream, post.idempotencyKey)
        let topic = settings.topics[stream] ?? stream.topic
        let batch: IngestBatch
        do {
            batch = try IngestBatch.parse(body, stream: stream, topic: topic, maxRecords: settings.maxRecords, maxRecordBytes: settings.maxRecordBytes, validator: validator)
        } catch .tooManyRecords(let count, let limit) {
            return Self.json(413, ErrorBody(error: IngestBatch.BodyError.tooManyRecords(count: count, limit: limit).description))
        } catch {
            return Self.json(400, ErrorBody(error: error.description))
        }
        if !batch.rejected.isEmpty {
            count(stream, "rejected", batch.rejected.count)
            let total = batch.records.count + batch.rejected.count
            return Self.json(400, RejectedBody(
                error: "\(batch.rejected.count) of \(total) records are invalid; nothing was produced", rejected: batch.rejected))
        }
        // Idempotency: a retry is answered as before, or produces only what is not yet durable.
        // Per record (by index): where it is durable, and why it is not. Arrays, not
        // dictionaries: a post hashed each index a few times over (callgrind).
        let count = batch.records.count
        var positions = [IdempotencyWindow.Position?](repeating: nil, count: count)
        let digest = idempotencyKey == nil ? 0 : Self.digest(body)
        if let key = idempotencyKey {
            // What another replica answered just before must be known here first.
            if let shared, !idempotency.knows(key, client: client.name) { await shared.catchUp() }
            switch idempotency.begin(key, client: client.name, digest: digest) {
            case .new: break
            case .resume(let durable): for (i, position) in durable where positions.indices.contains(i) { positions[i] = position }
            case .answered(let status, let previous):
                return Self.response(status, previous, headers: [("Idempotent-Replayed", "true")])
            case .inProgress:
                return Self.json(409, ErrorBody(error: "a request with this Idempotency-Key is being handled; retry when it is answered"))
            case .differentBody:
                return Self.json(422, ErrorBody(error: "this Idempotency-Key came with another body"))
            }
        }
        func acknowledged() -> [Int: IdempotencyWindow.Position] {
            Dictionary(uniqueKeysWithValues: positions.indices.compactMap { i in positions[i].map { (i, $0) } })
        }
        let resumed = positions.count { $0 != nil }
        var pending = positions.indices.filter { positions[$0] == nil }
        guard producers.current().inFlight + pending.count <= settings.maxInFlightRecords else {
            if let key = idempotencyKey { await failed(key, client: client.name, digest: digest, acknowledged: acknowledged()) }
            return Self.json(503, ErrorBody(error: "the producer's queue is full; retry later"), headers: [("Retry-After", "1")])
        }
        // Sent once; sent again (the records not acknowledged) only if the producer failed for
        // good meanwhile, through its replacement: a broker that lost the producer's state
        // refuses its next records, not the request.
        var errors = [KafkaError?](repeating: nil, count: count)
        for attempt in 1...2 where !pending.isEmpty {
            let producer = producers.current()
            let reports: [DeliveryReport]
            do {
                reports = try await producer.send(pending.count == count ? batch.records : pending.map { batch.records[$0] })
            } catch {
                for i in pending { errors[i] = error }
                break
            }
            for (report, index) in zip(reports, pending) {
                if let error = report.error {
                    errors[index] = error
                } else {
                    errors[index] = nil
                    positions[index] = IdempotencyWindow.Position(partition: report.partition, offset: report.offset)
                }
            }
            pending.removeAll { positions[$0] != nil }
            guard attempt == 1, !pending.isEmpty, producer.unusable != nil else { break }
        }
        let durable = positions.count { $0 != nil }
        let firstError = errors.first { $0 != nil } ?? nil
        let records = positions.indices.map { i in
            RecordResult(index: i, topic: topic, partition: positions[i]?.partition, offset: positions[i]?.offset,
                         error: positions[i] == nil ? (errors[i]?.description ?? "not acknowledged") : nil)
        }
        if let firstError {
            self.count(stream, "accepted", durable - resumed)
            self.count(stream, "failed", count - durable)
            health.deliveryFailed(firstError.description)
            if let key = idempotencyKey { await failed(key, client: client.name, digest: digest, acknowledged: acknowledged()) }
            logger.warning("ingest: \(count - durable) of \(count) records not acknowledged: \(firstError)")
            return Self.json(503, AcceptedBody(
                accepted: durable, records: records,
                error: "\(count - durable) of \(count) records were not acknowledged by the broker; "
                    + "retry with the same Idempotency-Key to produce only those"),
                headers: [("Retry-After", "1")])
        }
        health.delivered()
        self.count(stream, "accepted", durable - resumed)
        let answer = AcceptedBody(accepted: records.count, records: records, error: nil).json()
        if let key = idempotencyKey { await answered(key, client: client.name, digest: digest, status: 201, body: answer) }
        return Self.response(201, answer)
    }

    /// The request was answered: remembered here, and shared before the client gets the answer.
    private func answered(_ key: String, client: String, digest: UInt64, status: Int, body: [UInt8]) async {
        idempotency.finish(key, client: client, status: status, body: body)
        await share(IdempotencyRecord(client: client, key: key, digest: digest, expiresAt: expiry, status: status, body: body, acknowledged: [:]))
    }

    /// The request failed part-way: remembered here with what is durable, and shared.
    private func failed(_ key: String, client: String, digest: UInt64, acknowledged: [Int: IdempotencyWindow.Position]) async {
        idempotency.fail(key, client: client, acknowledged: acknowledged)
        await share(IdempotencyRecord(client: client, key: key, digest: digest, expiresAt: expiry, status: nil, body: [], acknowledged: acknowledged))
    }

    private var expiry: Int64 { Int64(Date().timeIntervalSince1970 * 1000) + settings.idempotencyWindow.wholeMilliseconds }

    /// Written to the shared topic and acknowledged before the answer goes out; if it cannot be,
    /// the key is still remembered here (and the failure logged and counted).
    private func share(_ record: IdempotencyRecord) async {
        guard let shared else { return }
        do {
            let report = try await producers.current().send(try shared.topic.record(record))
            if let error = report.error { throw error }
        } catch {
            Counter(label: IngestMetricName.idempotencyShareFailures).increment()
            logger.warning("an Idempotency-Key could not be shared; only this process remembers it", metadata: ["error": "\(error)"])
        }
    }

    private func count(_ stream: UpstreamStream, _ outcome: String, _ n: Int) {
        guard n > 0 else { return }
        if outcome == "accepted", let handles = metrics[stream] { return handles.accepted.increment(by: Int64(n)) }
        Counter(label: IngestMetricName.records, dimensions: [("stream", stream.rawValue), ("outcome", outcome)]).increment(by: Int64(n))
    }

    // MARK: Bodies

    struct ErrorBody: Encodable { var error: String }
    struct RejectedBody: Encodable {
        var error: String
        var rejected: [IngestBatch.Rejection]
    }
    struct RecordResult: Encodable {
        var index: Int
        var topic: String
        var partition: Int32?
        var offset: Int64?
        var error: String?
    }
    struct AcceptedBody: Encodable {
        var accepted: Int
        var records: [RecordResult]
        var error: String?

        /// The same bytes as `JSONEncoder` with sorted keys and unescaped slashes, written by
        /// hand into one buffer sized for the worst case: the answer to every post, where the
        /// encoder cost an eighth of the endpoint's CPU, and appending each piece to an array
        /// 2,800 instructions per record (callgrind of the endpoint under posts of 20).
        func json() -> [UInt8] {
            // Each escaped byte takes at most 6 (`\u00XX`); a number at most 20.
            var capacity = 64 + 6 * (error?.utf8.count ?? 0)
            for r in records { capacity += 128 + 6 * (r.topic.utf8.count + (r.error?.utf8.count ?? 0)) }
            return [UInt8](unsafeUninitializedCapacity: capacity) { buffer, count in
                var w = Writer(base: buffer.baseAddress!)
                w.put(#"{"accepted":"#)
                w.decimal(Int64(accepted))
                if let error {
                    w.put(#","error":"#)
                    w.string(error)
                }
                w.put(#","records":["#)
                for (i, r) in records.enumerated() {
                    if i > 0 { w.put(UInt8(ascii: ",")) }
                    w.put(UInt8(ascii: "{"))
                    if let error = r.error {
                        w.put(#""error":"#)
                        w.string(error)
                        w.put(UInt8(ascii: ","))
                    }
                    w.put(#""index":"#)
                    w.decimal(Int64(r.index))
                    if let offset = r.offset {
                        w.put(#","offset":"#)
                        w.decimal(offset)
                    }
                    if let partition = r.partition {
                        w.put(#","partition":"#)
                        w.decimal(Int64(partition))
                    }
                    w.put(#","topic":"#)
                    w.string(r.topic)
                    w.put(UInt8(ascii: "}"))
                }
                w.put("]}\n")
                precondition(w.at <= capacity, "the answer outgrew its buffer")
                count = w.at
            }
        }

        /// Writes into a buffer sized beforehand.
        struct Writer {
            let base: UnsafeMutablePointer<UInt8>
            var at = 0

            mutating func put(_ byte: UInt8) {
                base[at] = byte
                at &+= 1
            }

            mutating func put(_ literal: StaticString) {
                (base + at).update(from: literal.utf8Start, count: literal.utf8CodeUnitCount)
                at &+= literal.utf8CodeUnitCount
            }

            /// `v` in decimal, as `String(v)` spells it.
            mutating func decimal(_ v: Int64) {
                if v < 0 { put(UInt8(ascii: "-")) }
                var magnitude = v.magnitude
                var digits = 1
                var rest = magnitude / 10
                while rest > 0 { digits &+= 1; rest /= 10 }
                var i = at &+ digits
                at = i
                repeat {
                    i &-= 1
                    base[i] = UInt8(truncatingIfNeeded: magnitude % 10) &+ UInt8(ascii: "0")
                    magnitude /= 10
                } while magnitude > 0
            }

            /// A JSON string as `JSONEncoder` writes one (slashes unescaped).
            mutating func string(_ text: String) {
                put(UInt8(ascii: "\""))
                var text = text
                text.withUTF8 { utf8 in
                    for b in utf8 {
                        switch b {
                        case UInt8(ascii: "\""): put(#"\""#)
                        case UInt8(ascii: "\\"): put(#"\\"#)
                        case 0x0A: put(#"\n"#)
                        case 0x0D: put(#"\r"#)
                        case 0x09: put(#"\t"#)
                        case 0x08: put(#"\b"#)
                        case 0x0C: put(#"\f"#)
                        case 0..<0x20:
                            let hex: StaticString = "0123456789abcdef"
                            put(#"\u00"#)
                            put(hex.utf8Start[Int(b >> 4)])
                            put(hex.utf8Start[Int(b & 0xF)])
                        default: put(b)
                        }
                    }
                }
                put(UInt8(ascii: "\""))
            }
        }
    }

    private static func encode(_ value: some Encodable) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array((try? encoder.encode(value)) ?? Data(#"{"error":"unencodable answer"}"#.utf8)) + [0x0A]
    }

    private static func json(_ status: Int, _ value: some Encodable, headers: [(String, String)] = []) -> ServerResponse {
        response(status, encode(value), headers: headers)
    }

    private static func response(_ status: Int, _ body: [UInt8], headers: [(String, String)] = []) -> ServerResponse {
        var fields = HTTPHeaders(headers)
        fields.add(name: "Content-Type", value: "application/json")
        fields.add(name: "Cache-Control", value: "no-store")
        return ServerResponse(status: HTTPResponseStatus(statusCode: status), headers: fields, body: body)
    }

    private static func seconds(_ d: Duration) -> String {
        String(max(1, d.components.seconds + (d.components.attoseconds > 0 ? 1 : 0)))
    }

    /// FNV-1a over the body: tells a retried body from another one under the same key.
    static func digest(_ body: [UInt8]) -> UInt64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in body { h = (h ^ UInt64(b)) &* 0x0000_0100_0000_01b3 }
        return h
    }
}

/// The ingest service's metric names (the workers' are in `MetricName`).
public enum IngestMetricName {
    /// `{stream, code}`: requests by HTTP status.
    public static let requests = "pipeline_ingest_requests_total"
    /// `{stream, outcome}`: records accepted (durable), rejected (invalid), failed (not acknowledged).
    public static let records = "pipeline_ingest_records_total"
    /// `{stream}`: time from the request to its answer.
    public static let requestSeconds = "pipeline_ingest_request_seconds"
    /// Idempotency-Key outcomes that could not be written to the shared topic.
    public static let idempotencyShareFailures = "pipeline_ingest_idempotency_share_failures_total"
}
