import Foundation
import Kafka
import Operations
import Testing
@testable import Producers

let tick = #"{"type":"ticker","code":"KRW-BTC","trade_price":94187000.0,"signed_change_rate":0.01,"trade_volume":0.5,"trade_timestamp":1700000000000}"#
let badTick = #"{"type":"ticker","code":"KRW-ETH","trade_price":-1,"signed_change_rate":0,"trade_volume":0,"trade_timestamp":1}"#

/// The body of a post as records: every shape the endpoint takes, keys as `produce` gives them,
/// and each invalid record named by index, field and reason.
@Suite struct IngestBatchTests {
    let validator = IngestValidator()

    func parse(_ body: String, stream: UpstreamStream = .prices, max: Int = 100) throws(IngestBatch.BodyError) -> IngestBatch {
        try IngestBatch.parse(Array(body.utf8), stream: stream, topic: "t", maxRecords: max, validator: validator)
    }

    /// A record larger than the producer sends (its `message.max.bytes`) would fail in the
    /// producer after the rest of the body went out: it is refused with the body, named by its
    /// index among all the body's records, invalid ones included.
    @Test func aRecordLargerThanTheProducerSendsIsRefusedWithTheWholeBody() throws {
        let padded = tick.replacingOccurrences(of: "\"type\"", with: "\"pad\":\"\(String(repeating: "x", count: 2_000))\",\"type\"")
        let body = [badTick, tick, padded, tick].joined(separator: "\n")
        let batch = try IngestBatch.parse(Array(body.utf8), stream: .prices, topic: "t", maxRecords: 10, maxRecordBytes: 1_000, validator: validator)
        #expect(batch.rejected.map(\.index) == [0, 2], "\(batch.rejected)")
        let size = batch.rejected.last.map(\.detail) ?? ""
        #expect(size.contains("at most 1000") && size.contains("message.max.bytes"), "\(size)")
        #expect(batch.records.count == 2)
        // The size as librdkafka counts it: 36 bytes of framing, key, value, headers with their lengths.
        #expect(IngestBatch.wireSize(ProducerRecord(topic: "t", key: [1, 2], value: [3], headers: [KafkaHeader(key: "ab", value: [4])])) == 36 + 2 + 1 + 10 + 2 + 1)
        #expect(try parse(padded).rejected.isEmpty, "under the default of 1,000,000")
    }

    /// An envelope's `timestamp` is an epoch-ms time the producer can send: librdkafka sends 0 as
    /// "now" and a broker reads a negative one as none, so those and years past 9999 are refused.
    @Test func anEnvelopeTimestampOutsideEpochMillisecondsIsRefused() throws {
        for t in ["-1", "0", "9223372036854775807", "253402300800000"] {
            let batch = try parse(#"{"key":"KRW-BTC","timestamp":"# + t + #","value":"# + tick + "}")
            #expect(batch.rejected.map(\.field) == ["timestamp"] && batch.records.isEmpty, "\(t): \(batch.rejected)")
        }
        let kept = try parse(#"{"key":"KRW-BTC","timestamp":1700000000000,"value":"# + tick + "}")
        #expect(kept.rejected.isEmpty && kept.records.first?.timestamp == 1_700_000_000_000)
    }

    @Test func oneObjectAnArrayAndJSONLinesGiveOneRecordPerUpstreamObject() throws {
        let pretty = "{\n  \"type\": \"ticker\",\n  \"code\": \"KRW-XRP\",\n  \"trade_price\": 1,\n  \"signed_change_rate\": 0,\n  \"trade_volume\": 0,\n  \"trade_timestamp\": 1\n}\n"
        for (body, keys) in [
            (tick, ["KRW-BTC"]),
            (pretty, ["KRW-XRP"]),
            ("[\(tick), \(tick.replacingOccurrences(of: "KRW-BTC", with: "KRW-ETH"))]", ["KRW-BTC", "KRW-ETH"]),
            ("\(tick)\n\n\(tick.replacingOccurrences(of: "KRW-BTC", with: "KRW-SOL"))\r\n", ["KRW-BTC", "KRW-SOL"]),
            ("[\(tick)]\n\(tick)", ["KRW-BTC", "KRW-BTC"]),
        ] {
            let batch = try parse(body)
            #expect(batch.rejected.isEmpty, "\(body)")
            #expect(batch.records.map { String(decoding: $0.key ?? [], as: UTF8.self) } == keys)
            #expect(batch.records.allSatisfy { $0.topic == "t" && $0.headers.isEmpty })
        }
        // Values are the exact bytes of each record.
        #expect(try parse("  \(tick)  ").records.first?.value == Array(tick.utf8))
    }

    /// A ticker's key is the market its decoder read while validating it (the record is read
    /// once), and it is always what `pipelinectl produce` keys it by: the first of `code`,
    /// `market`, `cd`. Where the two could differ (a market named twice), the key is read the
    /// general way.
    @Test func theMarketReadWhileValidatingIsTheEntityKey() throws {
        let rest = #""trade_price":1,"signed_change_rate":0,"trade_volume":0,"trade_timestamp":1"#
        let simple = #"{"ty":"ticker","cd":"KRW-SIM","tp":1,"scr":0,"tv":0,"ttms":1}"#
        let records = [
            tick,
            #"{"market":"KRW-REST",\#(rest)}"#,
            simple,
            #"{"market":"KRW-A","code":"KRW-B",\#(rest)}"#,
            #"{"code":"KRW-B","code":"KRW-C",\#(rest)}"#,
            #"{"cd":"KRW-S","market":"KRW-M",\#(rest)}"#,
            #"{"code":"KRW-ESC",\#(rest)}"#,
            #"{"code":"KRW-BTC",\#(rest)}"#,
            #"{"market":null,"code":"KRW-N",\#(rest)}"#,
            "[\(tick),\(simple)]",
        ]
        let batch = try parse(records.joined(separator: "\n"))
        #expect(batch.rejected.isEmpty, "\(batch.rejected)")
        // The array's line gives one record per ticker.
        let values = records.dropLast() + [tick, simple]
        #expect(batch.records.count == values.count)
        for (record, value) in zip(batch.records, values) {
            let expected = UpstreamStream.prices.entityKey(of: Array(value.utf8)[...])
            #expect(record.key.map { String(decoding: $0, as: UTF8.self) } == expected, "\(value)")
        }
        #expect(batch.records.prefix(9).map { String(decoding: $0.key ?? [], as: UTF8.self) }
            == ["KRW-BTC", "KRW-REST", "KRW-SIM", "KRW-B", "KRW-B", "KRW-M", "KRW-ESC", "KRW-BTC", "KRW-N"])
        // Read while validating only where it is certain: one ticker naming its market once.
        let prices = IngestValidator().prices
        #expect(try prices.validate(readingMarket: Array(tick.utf8)[...]) == "KRW-BTC")
        #expect(try prices.validate(readingMarket: Array(records[4].utf8)[...]) == nil, "named twice")
        #expect(try prices.validate(readingMarket: Array(records[9].utf8)[...]) == nil, "a list")
        #expect(try prices.validate(readingMarket: Array(" [\(tick)]".utf8)[...]) == nil, "a list of one")
        // A record is an object: one that is itself a list (an element of the body's array) is refused.
        #expect(try parse("[[\(tick)]]").rejected.map(\.reason) == ["wrong-type"])
    }

    @Test func everyInvalidRecordIsNamedWithItsIndexFieldAndReason() throws {
        let body = [tick, badTick, "not json", "[1]", #"{"code":"KRW-BTC"}"#, tick].joined(separator: "\n")
        let batch = try parse(body)
        #expect(batch.records.count == 2)
        #expect(batch.rejected.map(\.index) == [1, 2, 3, 4])
        #expect(batch.rejected[0].field == "trade_price" && batch.rejected[0].reason == "invalid-value")
        #expect(batch.rejected[1].reason == "malformed-json")
        #expect(batch.rejected[2].reason == "wrong-type" && batch.rejected[2].detail.contains("a number"))
        #expect(batch.rejected[3].field == "trade_price" && batch.rejected[3].reason == "missing-field")
        // An array that does not close is one record that is not JSON.
        #expect(try parse("[\(tick)").rejected == [IngestBatch.Rejection(index: 0, field: "$", reason: "malformed-json", detail: "not valid JSON")])
    }

    @Test func eachStreamIsCheckedByItsOwnDecoder() throws {
        // A ticker is not a product, and the product decoder says which field is missing.
        let asProduct = try parse(tick, stream: .products)
        #expect(asProduct.records.isEmpty && asProduct.rejected.first?.reason == "missing-field")
        let product = #"{"id":7,"vendor_id":2,"name":"Cap","thumbnail":"https://img.example.com/7.jpg","currency":"KRW","price":25000,"stock":3,"created_at":"2022-10-18T10:05:00","issued_at":"2022-10-18T11:40:00"}"#
        let ok = try parse(product, stream: .products)
        #expect(ok.rejected.isEmpty && ok.records.first?.key == Array("7".utf8))
    }

    @Test func anEnvelopeSetsKeyHeadersAndTimeAndItsValueIsValidated() throws {
        let body = """
            {"key":"KRW-XRP","timestamp":1700000000123,"headers":{"user-id":"u7"},"value":\(tick)}
            {"timestamp":5,"value":\(tick)}
            {"key":"42","value":null}
            {"value":null}
            {"key":"KRW-ETH","value":\(badTick)}
            """
        let batch = try parse(body)
        #expect(batch.records.count == 3)
        #expect(batch.records[0].key == Array("KRW-XRP".utf8), "the envelope's key wins over the entity key")
        #expect(batch.records[0].headers == [KafkaHeader(key: "user-id", string: "u7")])
        #expect(batch.records[0].timestamp == 1_700_000_000_123)
        #expect(batch.records[0].value == Array(tick.utf8), "the value's exact bytes")
        #expect(batch.records[1].key == Array("KRW-BTC".utf8), "no key: the value's entity key")
        #expect(batch.records[2].value == nil && batch.records[2].key == Array("42".utf8), "a keyed tombstone")
        #expect(batch.rejected.map(\.index) == [3, 4])
        #expect(batch.rejected[0].field == "key" && batch.rejected[0].reason == "missing-field")
        #expect(batch.rejected[1].field == "value.trade_price", "\(batch.rejected[1])")
    }

    @Test func anEnvelopesHeadersReachTheDecoderThatNeedsThem() throws {
        let token = #"{"fcmToken":"fJ8k2:APA91b8si3Cf04WO-X-nELidUJSNuVZbfxApcMxK0np94i"}"#
        let body = """
            {"key":"u1","headers":{"user-id":"u1"},"value":\(token)}
            {"key":"u1","value":\(token)}
            """
        let batch = try parse(body, stream: .hangouts)
        #expect(batch.rejected.map(\.index) == [1], "a user-scoped message without user-id is refused: \(batch.rejected)")
        #expect(batch.rejected.first?.field == "value.header:user-id")
    }

    @Test func aSimpleFormatTickIsKeyedByItsMarketCode() throws {
        let simple = #"{"ty":"ticker","cd":"KRW-DOGE","tp":500.0,"scr":0.01,"tv":1.0,"ttms":1700000000000}"#
        let batch = try parse(simple)
        #expect(batch.rejected.isEmpty, "\(batch.rejected)")
        #expect(batch.records.first?.key == Array("KRW-DOGE".utf8))
    }

    /// The body's lines are found with memchr (an empty line, a missing last line feed and a
    /// body of line feeds only included), and a record is read as an envelope only when it holds
    /// `"value"`: anywhere in it, even inside a string, the envelope reader decides.
    @Test func linesAndTheEnvelopePrecheck() {
        #expect(IngestBatch.lines(Array("a\n\nbc\nd".utf8)) == [0..<1, 3..<5, 6..<7])
        #expect(IngestBatch.lines(Array("\n\n".utf8)).isEmpty && IngestBatch.lines([]).isEmpty)
        #expect(IngestBatch.lines(Array("abc\n".utf8)) == [0..<3])
        #expect(!IngestBatch.mayBeEnvelope(Array(tick.utf8)))
        #expect(IngestBatch.mayBeEnvelope(Array(#"{"key":"k","value":{}}"#.utf8)))
        #expect(IngestBatch.mayBeEnvelope(Array(#"{"note":"a \"value\" in text"}"#.utf8)) == false, "an escaped quote is not the field")
        // The needle at the very start and at the very end; `v`s that are not it; too short.
        #expect(IngestBatch.mayBeEnvelope(Array(#""value""#.utf8)))
        #expect(IngestBatch.mayBeEnvelope(Array(#"vv v"value""#.utf8)))
        #expect(!IngestBatch.mayBeEnvelope(Array(#"{"volume":"v","valu":"values"}"#.utf8)))
        #expect(!IngestBatch.mayBeEnvelope(Array(#""value"#.utf8)))
        #expect(!IngestBatch.mayBeEnvelope([]))
        #expect(IngestBatch.mayBeEnvelope(Array(#""value""#.utf8)) && !IngestBatch.mayBeEnvelope(Array(#""valu"#.utf8)))
        #expect(!IngestBatch.mayBeEnvelope(Array(#"{"values":1}"#.utf8)))
    }

    /// The entity key reads the object only as far as its first key name's value: the first of
    /// the names wins wherever it is, a repeated key keeps its first value, and a fraction or a
    /// boolean there is left to the slow reader, as before.
    @Test func theEntityKeyStopsAtTheFirstNamesValue() {
        #expect(UpstreamStream.prices.entityKey(of: Array(#"{"market":"KRW-A","code":"KRW-B"}"#.utf8)[...]) == "KRW-B", "code before market")
        #expect(UpstreamStream.prices.entityKey(of: Array(#"{"code":"KRW-B","code":"KRW-C"}"#.utf8)[...]) == "KRW-B")
        #expect(UpstreamStream.prices.entityKey(of: Array(#"{"cd":"KRW-S","market":"KRW-M"}"#.utf8)[...]) == "KRW-M")
        #expect(UpstreamStream.prices.entityKey(of: Array(#"{"code":"","cd":"KRW-S"}"#.utf8)[...]) == "KRW-S", "an empty code names nothing")
        #expect(UpstreamStream.products.entityKey(of: Array(#"{"id":2012,"name":"x"}"#.utf8)[...]) == "2012")
        #expect(UpstreamStream.products.entityKey(of: Array(#"{"id":2012.0}"#.utf8)[...]) == "2012.0", "a fraction: Foundation's reading")
        #expect(UpstreamStream.products.entityKey(of: Array(#"{"name":"x"}"#.utf8)[...]) == nil)
        #expect(UpstreamStream.prices.entityKey(of: Array(#"{"type":"ticker","code":"KRW-Z","#.utf8)[...]) == "KRW-Z",
                "the rest is not read: whether the record is valid is the decoder's to say")
    }

    @Test func bodiesThatHoldNoRecordsAreRefusedAsAWhole() {
        #expect(throws: IngestBatch.BodyError.empty) { try parse("  \n ") }
        #expect(throws: IngestBatch.BodyError.empty) { try parse("[]") }
        #expect(throws: IngestBatch.BodyError.tooManyRecords(count: 3, limit: 2)) { try parse("[\(tick),\(tick),\(tick)]", max: 2) }
    }
}

@Suite struct ClientTokensTests {
    let tokens = try! ClientTokens(parsing: """
        # name token [streams]
        market-backend  0123456789abcdef0123 products,hangouts
        prices-relay    fedcba9876543210fedc
        """, source: "tokens.txt")

    @Test func aBearerTokenNamesItsClientAndItsStreams() {
        let market = tokens.client(authorization: "Bearer 0123456789abcdef0123")
        #expect(market?.name == "market-backend")
        #expect(market?.mayPost(to: .products) == true && market?.mayPost(to: .prices) == false)
        #expect(tokens.client(authorization: "bearer fedcba9876543210fedc")?.mayPost(to: .prices) == true)
    }

    @Test func anythingElseIsNoClient() {
        for header in [nil, "", "Bearer", "Bearer ", "Basic 0123456789abcdef0123", "Bearer 0123456789abcdef012", "Bearer 0123456789abcdef01234",
                       "Bearer fedcba9876543210fedc0123456789abcdef0123"] {
            #expect(tokens.client(authorization: header) == nil, "\(header ?? "nil")")
        }
    }

    @Test func mistakesInTheTokenListAreNamedWithTheirLine() {
        func error(_ text: String) -> String {
            do { _ = try ClientTokens(parsing: text, source: "env"); return "" } catch { return error.description }
        }
        #expect(error("a short") == "env:1: the token of 'a' is shorter than 16 characters")
        #expect(error("a 0123456789abcdef prices,nope") .hasPrefix("env:1: unknown stream 'nope'"))
        #expect(error("a 0123456789abcdef; a 0123456789abcdeX") == "env:2: client 'a' is named twice")
        #expect(error("a 0123456789abcdef; b 0123456789abcdef") == "env:2: the token of 'b' is another client's too")
        #expect(error("# nothing") == "env: no client (one per line: NAME TOKEN [STREAM,…])")
        #expect(error("a b c d") == "env:1: expected NAME TOKEN [STREAM,…], got 4 fields")
    }
}

@Suite struct AdmissionTests {
    @Test func theRateLimitAdmitsABurstThenOnePerInterval() {
        let limiter = RateLimiter(perSecond: 10)
        let t0 = ContinuousClock.now
        for _ in 0..<10 { #expect(limiter.admit("a", now: t0) == nil) }
        #expect(limiter.admit("a", now: t0) == .milliseconds(100))
        #expect(limiter.admit("b", now: t0) == nil, "per client")
        #expect(limiter.admit("a", now: t0 + .milliseconds(100)) == nil)
        let wait = limiter.admit("a", now: t0 + .milliseconds(150))
        #expect(wait.map { $0 >= .milliseconds(50) && $0 <= .milliseconds(51) } == true, "half a token: about 50 ms, got \(String(describing: wait))")
    }

    @Test func anIdempotencyKeyIsAnsweredOnceResumedAfterAFailureAndBoundToItsBody() {
        let window = IdempotencyWindow(capacity: 2, window: .seconds(60))
        let t0 = ContinuousClock.now
        #expect(window.begin("k", client: "a", digest: 1, now: t0) == .new)
        #expect(window.begin("k", client: "a", digest: 1, now: t0) == .inProgress)
        #expect(window.begin("k", client: "a", digest: 2, now: t0) == .differentBody)
        #expect(window.begin("k", client: "b", digest: 2, now: t0) == .new, "keys are per client")
        let durable = [0: IdempotencyWindow.Position(partition: 1, offset: 5)]
        window.fail("k", client: "a", acknowledged: durable)
        #expect(window.begin("k", client: "a", digest: 1, now: t0) == .resume(acknowledged: durable))
        window.finish("k", client: "a", status: 201, body: [1])
        #expect(window.begin("k", client: "a", digest: 1, now: t0) == .answered(status: 201, body: [1]))
        // Bounded: a third key forgets the oldest; and every key is forgotten after the window.
        #expect(window.begin("k3", client: "a", digest: 1, now: t0) == .new)
        #expect(window.count == 2)
        #expect(window.begin("k", client: "a", digest: 1, now: t0) == .new, "the oldest was forgotten")
        #expect(window.begin("k3", client: "a", digest: 1, now: t0 + .seconds(61)) == .new)
    }
}

/// The ingest answer, written by hand, is byte for byte what `JSONEncoder` wrote.
@Suite struct IngestAnswerTests {
    static func encoder(_ body: IngestHTTPService.AcceptedBody) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array(try encoder.encode(body)) + [0x0A]
    }

    @Test func theAnswerIsWhatJSONEncoderWrites() throws {
        typealias R = IngestHTTPService.RecordResult
        let awkward = "a \"quoted\" \\ path/with/slashes\n\r\t\u{08}\u{0C}\u{01}\u{1F} é 한 😀"
        let bodies: [IngestHTTPService.AcceptedBody] = [
            .init(accepted: 0, records: [], error: nil),
            .init(accepted: 2, records: [R(index: 0, topic: "prices.raw", partition: 3, offset: 1_234_567_890_123), R(index: 1, topic: "prices.raw", partition: 0, offset: 0)], error: nil),
            .init(accepted: 1, records: [R(index: 0, topic: "t", partition: nil, offset: nil, error: awkward), R(index: 7, topic: awkward, partition: -1, offset: -1)], error: awkward),
            // Extreme numbers, and topics that change from record to record (each escaped once per run).
            .init(accepted: Int.max, records: [
                R(index: 0, topic: "a", partition: Int32.min, offset: Int64.min), R(index: Int.max, topic: "b/\"c", partition: Int32.max, offset: Int64.max),
                R(index: 2, topic: "a", partition: 9, offset: 10), R(index: 3, topic: "a", partition: 0, offset: 99), R(index: -5, topic: "", partition: 1, offset: 1000),
            ], error: nil),
        ]
        for body in bodies {
            #expect(body.json() == (try Self.encoder(body)), "\(String(decoding: body.json(), as: UTF8.self))")
        }
    }
}
