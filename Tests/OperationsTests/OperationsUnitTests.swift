import Foundation
import Testing
import Workers
@testable import Pipeline
@testable import Kafka
@testable import Operations

@Suite struct ProduceParserTests {
    func parse(_ stream: UpstreamStream, _ text: String) -> (records: [ProduceLine], rejected: [RejectedLine]) {
        ProduceParser(stream: stream).parse(Array(text.utf8), source: "in.jsonl")
    }

    func key(_ l: ProduceLine) -> String? { l.record.key.map { String(decoding: $0, as: UTF8.self) } }

    @Test func keysEachStreamByItsEntity() {
        #expect(parse(.prices, #"{"type":"ticker","code":"KRW-XRP","trade_price":812.0}"#).records.map(key) == ["KRW-XRP"])
        #expect(parse(.prices, #"[{"market":"KRW-BTC","trade_price":1},{"market":"KRW-ETH","trade_price":2}]"#).records.map(key) == ["KRW-BTC", "KRW-ETH"])
        #expect(parse(.products, #"{"id":123,"vendor_id":4,"name":"lamp"}"#).records.map(key) == ["123"])
        #expect(parse(.campaigns, #"[{"id":7,"name":"a"},{"id":8,"name":"b"}]"#).records.map(key) == ["7", "8"])
        #expect(parse(.hangouts, #"{"status":"OK","message":"ok","data":{"hangoutInfoId":"h-91"}}"#).records.map(key) == ["h-91"])
        #expect(parse(.hangouts, #"{"method":"PUT","path":"hangout/h-101","userId":"u1","form":{"action":"join"}}"#).records.map(key) == ["h-101"])
        #expect(parse(.hangouts, #"{"method":"PUT","path":"hangout/like/h-7"}"#).records.map(key) == ["h-7"])
        #expect(parse(.challenges, #"{"id":42,"leaderId":7,"title":"x"}"#).records.map(key) == ["42"])
        #expect(parse(.challenges, #"{"method":"POST","path":"challenges/apply/42/8"}"#).records.map(key) == ["42"])
    }

    @Test func valuesAreTheExactInputBytes() throws {
        let line = #"{"code":"KRW-BTC","acc_trade_price":10711749229.465390000000,"rate":8.4e-05}"#
        let r = try #require(parse(.prices, line).records.first)
        #expect(r.record.value == Array(line.utf8))
        let arrayLine = #"[ {"market":"KRW-BTC","p":1.10} , {"market":"KRW-ETH","p":2.0e3} ]"#
        #expect(parse(.prices, arrayLine).records.map { String(decoding: $0.record.value!, as: UTF8.self) }
                == [#"{"market":"KRW-BTC","p":1.10}"#, #"{"market":"KRW-ETH","p":2.0e3}"#])
        #expect(parse(.prices, line).records[0].record.topic == "prices.raw")
    }

    @Test func envelopesKeepKeyHeadersAndTimestamp() throws {
        let text = #"{"timestamp":1714953600000,"key":"uJ8k2mQp","headers":{"user-id":"uJ8k2mQp"},"value":{"fcmToken":"abc"}}"#
        let r = try #require(parse(.hangouts, text).records.first)
        #expect(key(r) == "uJ8k2mQp")
        #expect(r.record.timestamp == 1_714_953_600_000)
        #expect(r.record.headers == [KafkaHeader(key: "user-id", string: "uJ8k2mQp")])
        #expect(r.record.value == Array(#"{"fcmToken":"abc"}"#.utf8))
        // No key in the envelope: the entity of its value; a null value is a tombstone.
        let noKey = try #require(parse(.challenges, #"{"timestamp":5,"value":{"id":43,"title":"t"}}"#).records.first)
        #expect(key(noKey) == "43")
        let tombstone = try #require(parse(.hangouts, #"{"key":"h-101","value":null}"#).records.first)
        #expect(tombstone.record.value == nil)
        #expect(key(tombstone) == "h-101")
    }

    @Test func rejectedLinesAreNamedAndValidOnesKept() {
        let text = """
            {"id":1}
            {"id":2,
            
            "just a string"
            {"id":3}
            [1, {"id":4}]
            """
        let (records, rejected) = parse(.products, text)
        #expect(records.map(key) == ["1", "3", "4"])
        #expect(rejected.map(\.line) == [2, 4, 6])
        #expect(rejected[0].description == "in.jsonl:2: not valid JSON")
        #expect(rejected[1].reason.contains("expected a JSON object"))
    }

    @Test func aBodyWithoutEntityIsSentUnkeyed() throws {
        let r = try #require(parse(.hangouts, #"{"status":"OK","message":"success","data":{"hangoutNoti":true}}"#).records.first)
        #expect(r.keyed == false)
        #expect(r.record.key == nil)
    }

    @Test func aWholeFileArrayGivesOneRecordPerElementWithItsLine() {
        let text = """
            [
              {"id": 10, "name": "a"},
              {"id": 11,
               "name": "b"},
              {"id": 12, "name": "c"}
            ]
            """
        let (records, rejected) = parse(.campaigns, text)
        #expect(rejected.isEmpty)
        #expect(records.map(key) == ["10", "11", "12"])
        #expect(records.map(\.line) == [2, 3, 5])
    }

    /// The entity key read in place (``UpstreamStream/entityKey(of:)``) is the one read from the
    /// parsed object, for every record of every sample stream and for the shapes that take the
    /// slow path (nested and path-derived keys, fractional, boolean, huge and empty ids).
    @Test func theKeyReadInPlaceIsTheParsedObjectsKey() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        var checked = 0
        for stream in UpstreamStream.allCases {
            let folder = root.appendingPathComponent("samples/\(stream.rawValue)")
            for file in try FileManager.default.contentsOfDirectory(atPath: folder.path) where file.hasSuffix(".jsonl") {
                let data = try Data(contentsOf: folder.appendingPathComponent(file))
                for line in data.split(separator: 0x0A) where !line.isEmpty {
                    let bytes = Array(line)
                    guard let object = (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any] else { continue }
                    #expect(stream.entityKey(of: bytes[...]) == stream.entityKey(object), "\(stream) \(file): \(String(decoding: bytes.prefix(120), as: UTF8.self))")
                    checked += 1
                }
            }
        }
        #expect(checked > 100, "read \(checked) sample records")
        let shapes: [(UpstreamStream, String)] = [
            (.products, #"{"id":481.0}"#), (.products, #"{"id":1.0E7}"#), (.products, #"{"id":true}"#), (.products, #"{"id":""}"#),
            (.products, #"{"id":123456789012345678901}"#), (.products, #"{"name":"no id"}"#), (.products, #"{"id":"a\"b"}"#),
            (.prices, #"{"market":"KRW-BTC","code":""}"#), (.prices, #"{"cd":"KRW-ETH"}"#), (.prices, #"{"code":null,"market":"KRW-XRP"}"#),
            (.hangouts, #"{"data":{"hangoutInfoId":"h-7"}}"#), (.hangouts, #"{"path":"hangout/h-9/like"}"#), (.hangouts, #"{"hangoutInfoId":12}"#),
            (.challenges, #"{"path":"challenges/apply/42/8"}"#), (.challenges, #"{"challengeId":5,"id":-3}"#), (.campaigns, #"{"id":-7,"x":{"id":1}}"#),
        ]
        for (stream, text) in shapes {
            let object = try #require((try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any])
            #expect(stream.entityKey(of: Array(text.utf8)[...]) == stream.entityKey(object), "\(stream) \(text)")
        }
    }

    @Test func theSampleStreamsParseWithoutRejections() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        for stream in [UpstreamStream.hangouts, .challenges] {
            for file in ["stream.jsonl", "responses.jsonl"] {
                let data = try Data(contentsOf: root.appendingPathComponent("samples/\(stream.rawValue)/\(file)"))
                let (records, rejected) = ProduceParser(stream: stream).parse(Array(data), source: file)
                #expect(rejected.isEmpty, "\(stream) \(file): \(rejected)")
                #expect(!records.isEmpty)
                let lines = data.split(separator: 0x0A).filter { !$0.isEmpty }.count
                #expect(records.count >= lines, "nothing valid dropped in \(stream) \(file)")
            }
        }
    }
}

@Suite struct ReplayFilterTests {
    func record(_ p: Int32, _ o: Int64, ts: Int64?, key: String? = nil, headers: [KafkaHeader] = []) -> ConsumerRecord {
        ConsumerRecord(topic: "t", partition: p, offset: o, key: key.map { Array($0.utf8) }, value: [1], headers: headers, timestamp: ts)
    }

    @Test func timeRangeIsHalfOpen() {
        var f = ReplayFilter()
        f.since = 1000
        f.until = 2000
        #expect(!f.matches(record(0, 0, ts: 999)))
        #expect(f.matches(record(0, 1, ts: 1000)))
        #expect(f.matches(record(0, 2, ts: 1999)))
        #expect(!f.matches(record(0, 3, ts: 2000)))
        #expect(!f.matches(record(0, 4, ts: nil)), "no timestamp: not in any time range")
    }

    @Test func partitionsOffsetsKeysAndHeaders() {
        var f = ReplayFilter()
        f.partitions = [1]
        f.fromOffset = 5
        f.toOffset = 7
        f.key = "k"
        f.headers = [("app", "hangouts"), ("trace", nil)]
        let h = [KafkaHeader(key: "app", string: "hangouts"), KafkaHeader(key: "trace", value: nil)]
        #expect(f.matches(record(1, 5, ts: 0, key: "k", headers: h)))
        #expect(!f.matches(record(0, 5, ts: 0, key: "k", headers: h)))
        #expect(!f.matches(record(1, 7, ts: 0, key: "k", headers: h)))
        #expect(!f.matches(record(1, 6, ts: 0, key: "x", headers: h)))
        #expect(!f.matches(record(1, 6, ts: 0, key: "k", headers: [h[0]])))
        #expect(!f.matches(record(1, 6, ts: 0, key: "k", headers: [KafkaHeader(key: "app", string: "prices"), h[1]])))
        #expect(f.startOffsets([TopicPartition("t", 0), TopicPartition("t", 1)]) == [TopicPartitionOffset("t", 1, offset: 5)])
        #expect(ReplayFilter.parseHeader("a=b=c")! == ("a", "b=c"))
        #expect(ReplayFilter.parseHeader("=x") == nil)
    }

    @Test func timesAndDurations() throws {
        let now: Int64 = 1_714_953_600_000
        #expect(try TimeSpec.parse("2h", now: now) == now - 7_200_000)
        #expect(try TimeSpec.parse("1h30m", now: now) == now - 5_400_000)
        #expect(try TimeSpec.parse("500ms", now: now) == now - 500)
        #expect(try TimeSpec.parse("1714953600000", now: 0) == 1_714_953_600_000)
        #expect(try TimeSpec.parse("2024-05-06T00:00:00Z", now: 0) == 1_714_953_600_000)
        #expect(try TimeSpec.parse("2024-05-06T09:00:00+09:00", now: 0) == 1_714_953_600_000)
        #expect(try TimeSpec.parse("2024-05-06", now: 0) == 1_714_953_600_000)
        #expect(throws: TimeSpec.Invalid.self) { try TimeSpec.parse("yesterday", now: 0) }
        #expect(TimeSpec.duration("2x") == nil)
        #expect(TimeSpec.duration("15") == nil)
    }

    /// Digits beyond Int64, durations past it, and times before 1970 or after 9999 are not
    /// times: refused, never an overflow trap nor a negative time (the broker's -1 latest, -2 earliest).
    @Test func timesAndDurationsOutOfRangeAreRefused() throws {
        let now: Int64 = 1_714_953_600_000
        for text in ["99999999999999999999", "9223372036854775808", "-9223372036854775808", "-1000000000", "-2", "253402300800000",
                     "9223372036854775807", "99999999999999999999ms", "9223372036854775807s", "106751991167301d", "1000000000000000w",
                     "9223372036854775807ms1ms", "1969-12-31T23:59:59Z", "60000d"] {
            #expect(throws: TimeSpec.Invalid.self, "\(text)") { try TimeSpec.parse(text, now: now) }
        }
        #expect(TimeSpec.duration("99999999999999999999s") == nil)
        #expect(TimeSpec.duration("9223372036854775807ms") == Int64.max)
        #expect(TimeSpec.duration("9223372036854775807ms1ms") == nil)
        #expect(try TimeSpec.parse("253402300799999", now: 0) == 253_402_300_799_999)
        #expect(try TimeSpec.parse("0000000000", now: 0) == 0)
    }

    @Test func pacing() {
        var original = Pacer(.original)
        #expect(original.delay(before: record(0, 0, ts: 1000)) == .zero)
        #expect(original.delay(before: record(0, 1, ts: 1250)) == .milliseconds(250))
        #expect(original.delay(before: record(0, 2, ts: 1200)) == .zero, "out of order: no wait")
        var fixed = Pacer(.perSecond(4))
        #expect(fixed.delay(before: record(0, 0, ts: 0)) == .milliseconds(250))
        // A rate so low that its wait is beyond Int64 nanoseconds waits as long as it can, without trapping.
        var slow = Pacer(.perSecond(1e-300))
        #expect(slow.delay(before: record(0, 0, ts: 0)) == .nanoseconds(Int64.max))
        var fromTheFarPast = Pacer(.original)
        _ = fromTheFarPast.delay(before: record(0, 0, ts: Int64.min))
        #expect(fromTheFarPast.delay(before: record(0, 1, ts: Int64.max)) == .milliseconds(Int64.max), "a gap beyond Int64 is held at its end")
    }

    @Test func recordJSONIsAnEnvelopeRunReadsBack() {
        let r = ConsumerRecord(topic: "t", partition: 2, offset: 9, key: Array("k".utf8), value: Array(#"{"a":1}"#.utf8),
                               headers: [KafkaHeader(key: "h", string: "v\"x"), KafkaHeader(key: "n", value: nil)], timestamp: 5)
        #expect(RecordJSON.line(r) == #"{"topic":"t","partition":2,"offset":9,"timestamp":5,"key":"k","value":{"a":1},"headers":{"h":"v\"x","n":null}}"#)
        var text = r
        text.value = Array("plain\ntext".utf8)
        #expect(RecordJSON.line(text).contains(#""value":"plain\ntext""#))
        text.value = nil
        #expect(RecordJSON.line(text).contains(#""value":null"#))
    }
}

@Suite struct DeadLetterRedriveTests {
    func deadLetter(stage: String, reason: DecodeFailure.Reason, origin: String = "prices.raw", offset: Int64 = 3, redriven: Int? = nil) -> ConsumerRecord {
        var headers = [RecordHeader("trace", "t-1")]
        if let redriven { headers.append(RecordHeader(DeadLetterHeader.redriven, String(redriven))) }
        let input = InputRecord(key: Array("KRW-BTC".utf8), value: Array("{bad".utf8), headers: headers, timestamp: 1234,
                                origin: RecordOrigin(topic: origin, partition: 1, offset: offset))
        let letter = DeadLetter(stage: stage, transform: nil, input: input, failure: DecodeFailure(field: "price", reason: reason, detail: "d"))
        return ConsumerRecord(topic: "pipeline.dead-letters", partition: 0, offset: 0, key: letter.key, value: letter.value,
                              headers: letter.recordHeaders.map { KafkaHeader(key: $0.name, value: $0.value) }, timestamp: 1234)
    }

    @Test func selectsByReasonStageAndOrigin() throws {
        let a = try #require(DeadLetterEntry(deadLetter(stage: "prices.decode", reason: .missingField)))
        let b = try #require(DeadLetterEntry(deadLetter(stage: "products.decode", reason: .wrongType, origin: "products.raw")))
        var s = DeadLetterSelection()
        #expect(s.matches(a) && s.matches(b))
        s.reasons = ["missing-field"]
        #expect(s.matches(a) && !s.matches(b))
        s = DeadLetterSelection()
        s.stages = ["products.decode"]
        #expect(!s.matches(a) && s.matches(b))
        s = DeadLetterSelection()
        s.originTopics = ["prices.raw"]
        #expect(s.matches(a) && !s.matches(b))
        #expect(DeadLetterEntry(ConsumerRecord(topic: "x", partition: 0, offset: 0, key: nil, value: [1])) == nil)
    }

    @Test func redriveRestoresTheOriginalAndCountsRedrives() throws {
        let e = try #require(DeadLetterEntry(deadLetter(stage: "prices.decode", reason: .deliveryFailed)))
        guard case .send(let r) = DeadLetterRedrive.decide(e, maxRedrives: 3) else { Issue.record("not sent"); return }
        #expect(r.topic == "prices.raw")
        #expect(r.partition == 1)
        #expect(r.key == Array("KRW-BTC".utf8))
        #expect(r.value == Array("{bad".utf8))
        #expect(r.timestamp == 1234)
        #expect(r.headers == [KafkaHeader(key: "trace", string: "t-1"), KafkaHeader(key: DeadLetterHeader.redriven, string: "1")])
        // Failing again: the new dead letter carries redriven=1; the next redrive counts 2.
        let again = try #require(DeadLetterEntry(deadLetter(stage: "prices.decode", reason: .deliveryFailed, redriven: 1)))
        guard case .send(let r2) = DeadLetterRedrive.decide(again, maxRedrives: 3) else { Issue.record("not sent"); return }
        #expect(r2.headers.last == KafkaHeader(key: DeadLetterHeader.redriven, string: "2"))
        #expect(r2.headers.filter { $0.key == DeadLetterHeader.redriven }.count == 1)
    }

    @Test func aRecordThatKeepsFailingStops() throws {
        let e = try #require(DeadLetterEntry(deadLetter(stage: "s", reason: .invalidValue, redriven: 3)))
        guard case .exhausted(let n) = DeadLetterRedrive.decide(e, maxRedrives: 3) else { Issue.record("sent again"); return }
        #expect(n == 3)
    }
}

@Suite struct OffsetResetTests {
    let tp0 = TopicPartition("t", 0), tp1 = TopicPartition("t", 1)
    var marks: [TopicPartition: Watermarks] { [tp0: Watermarks(low: 10, high: 100), tp1: Watermarks(low: 0, high: 50)] }

    @Test func targets() {
        let committed = [tp0: Int64(40), tp1: Int64(45)]
        func plan(_ t: OffsetResetTarget, times: [TopicPartition: Int64] = [:]) -> [Int64] {
            OffsetReset.plan(target: t, partitions: [tp1, tp0], committed: committed, watermarks: marks, timeOffsets: times).map(\.target)
        }
        #expect(plan(.earliest) == [10, 0])
        #expect(plan(.latest) == [100, 50])
        #expect(plan(.shift(-50)) == [10, 0], "clamped to the low watermark")
        #expect(plan(.shift(10)) == [50, 50], "clamped to the log end")
        #expect(plan(.offset(60)) == [60, 50])
        #expect(plan(.time(0), times: [tp0: 70, tp1: -1]) == [70, 50], "no record that late: the log end")
        #expect(OffsetReset.plan(target: .earliest, partitions: [tp0], committed: [:], watermarks: marks)[0].current == nil)
    }

    /// A committed offset and watermarks from the broker near Int64's end, shifted by anything:
    /// the sum is held at the end (then clamped to the log end), not an overflow trap.
    @Test func aShiftPastInt64IsClampedNotATrap() {
        let far = TopicPartition("t", 0)
        let marks = [far: Watermarks(low: Int64.max - 100, high: Int64.max - 1)]
        for shift in [Int64.max, NumberBounds.shift.upperBound, 1] {
            let plan = OffsetReset.plan(target: .shift(shift), partitions: [far], committed: [far: Int64.max - 2], watermarks: marks)
            #expect(plan.map(\.target) == [Int64.max - 1], "\(shift)")
        }
        let back = OffsetReset.plan(target: .shift(Int64.min), partitions: [far], committed: [far: Int64.max - 2], watermarks: marks)
        #expect(back.map(\.target) == [Int64.max - 100])
        let none = OffsetReset.plan(target: .shift(Int64.max), partitions: [tp0], committed: [:], watermarks: [tp0: Watermarks(low: 5, high: 9)])
        #expect(none.map(\.target) == [9], "from the low watermark when nothing is committed")
    }
}

@Suite struct ManagedProcessTests {
    /// Real processes: an exit code, and a signal, read from their wait statuses.
    @Test func exitCodesAndSignalsReadFromTheWaitStatus() async throws {
        let exits = try ManagedProcess.launch("/bin/sh", arguments: ["-c", "exit 3"], environment: [:])
        #expect(ManagedProcess.exitCode(waitStatus: await exits.waitForExit()) == 3)
        let killed = try ManagedProcess.launch("/bin/sh", arguments: ["-c", "kill -9 $$"], environment: [:])
        #expect(ManagedProcess.exitCode(waitStatus: await killed.waitForExit()) == -9)
    }
}
