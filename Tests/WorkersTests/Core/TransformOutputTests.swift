import Testing
import Workers

/// The buffer stages write their outputs into, shared by every input of a batch.
@Suite struct TransformOutputTests {
    static let records = [
        OutputRecord(output: "a", key: Array("k1".utf8), value: Array(#"{"x":1}"#.utf8), headers: [RecordHeader("h", "v")], dedupeKey: "d1"),
        OutputRecord(output: "b", key: nil, value: nil, dedupeKey: ""),
        OutputRecord(output: "a", key: [], value: [], headers: [RecordHeader(name: "empty", value: []), RecordHeader("h", "2")], dedupeKey: "d3"),
    ]

    @Test func recordsReadBackAsTheyWereWritten() {
        var out = TransformOutput()
        for r in Self.records { out.append(r) }
        #expect(out.records == Self.records)
        #expect(out.count == 3)
        #expect(TransformOutput(records: Self.records) == out)
    }

    @Test func theDirectWriteMatchesAWrittenRecord() {
        var out = TransformOutput()
        out.append(Self.records[0])
        out.append(
            output: "ticks", key: Array("KRW-BTC".utf8),
            dedupeKey: { k in
                k.append("tick:")
                k.append(Int64(-42))
            },
            value: { w in
                w.beginObject()
                w.key("price"); w.double(1.5)
                w.endObject()
            })
        #expect(out.records == [
            Self.records[0],
            OutputRecord(output: "ticks", key: Array("KRW-BTC".utf8), value: Array(#"{"price":1.5}"#.utf8), dedupeKey: "tick:-42"),
        ])
    }

    /// Outputs whose topic identifies records by content get no dedupe key: the transform's key
    /// closure is not run for them, and the other outputs' keys are written as before, also
    /// when the set is given after outputs were written.
    @Test func outputsIdentifiedByContentGetNoDedupeKey() {
        var out = TransformOutput()
        out.append(output: "kept", key: nil, dedupeKey: { $0.append("k1") }, value: { $0.int(1) })
        out.outputsIdentifiedByContent = ["ticks"]
        var built = 0
        out.append(output: "ticks", key: Array("KRW-BTC".utf8), dedupeKey: { built += 1; $0.append("tick:1") }, value: { $0.int(2) })
        out.append(output: "kept", key: nil, dedupeKey: { $0.append("k2") }, value: { $0.int(3) })
        out.append(OutputRecord(output: "ticks", key: nil, value: Array("4".utf8), dedupeKey: "tick:2"))
        #expect(built == 0)
        #expect(out.records.map(\.dedupeKey) == ["k1", "", "k2", ""])
        #expect(out.records.map(\.value) == ["1", "2", "3", "4"].map { Array($0.utf8) })
        out.outputsIdentifiedByContent = []
        out.append(output: "ticks", key: nil, dedupeKey: { built += 1; $0.append("tick:3") }, value: { $0.int(5) })
        #expect(built == 1)
        #expect(out.records.last?.dedupeKey == "tick:3")
    }

    @Test func longValuesAndDedupeKeysAreWrittenWhole() {
        // Longer than the writer's zero block (4,096) and the dedupe key's stack buffer (256).
        let text = String(repeating: "가나다abc", count: 1_000)
        let long = String(repeating: "x", count: 700)
        var out = TransformOutput()
        out.append(output: "o", key: nil, dedupeKey: { $0.append(long); $0.append("#"); $0.append(7) }, value: { $0.string(text) })
        out.append(output: "o", key: nil, dedupeKey: { $0.append("short") }, value: { $0.int(1) })
        #expect(out.records.map(\.dedupeKey) == [long + "#7", "short"])
        #expect(out.records[0].value == Array(JSONWriter.quoted(text).utf8))
        #expect(out.records[1].value == Array("1".utf8))
    }

    /// Records written in place into the room after the last one, across many of its blocks:
    /// values, keys and dedupe keys of every size up to past the room a writer or a dedupe key
    /// keeps, each read back whole, and the buffer handed over holds the written bytes only.
    @Test func recordsOfEverySizeAcrossTheRoomsBlocks() {
        var rng = SplitMix64(seed: 5)
        var out = TransformOutput(reservingCapacity: 100, bytesPerRecord: 64)
        var expected: [OutputRecord] = []
        var written = 0
        for i in 0..<2_000 {
            let key = Array(repeating: UInt8(ascii: "k"), count: Int(rng.next() % 40))
            let text = String(repeating: "v", count: Int(rng.next() % (i % 50 == 0 ? 3_000 : 600)))
            let dedupe = String(repeating: "d", count: Int(rng.next() % (i % 40 == 0 ? 700 : 120)))
            out.append(output: "o", key: key, dedupeKey: { $0.append(dedupe); $0.append(i) }, value: { $0.string(text) })
            let value = Array(JSONWriter.quoted(text).utf8)
            expected.append(OutputRecord(output: "o", key: key, value: value, dedupeKey: dedupe + String(i)))
            written += key.count + value.count + dedupe.utf8.count + String(i).utf8.count
        }
        #expect(out.records == expected)
        #expect(out.byteCount == written)
        #expect(out.takeBytes().count == written)
    }

    @Test func discardRemovesOnlyWhatCameAfterTheMark() {
        var out = TransformOutput(records: [Self.records[0]], failures: [DecodeFailure(field: "f", reason: .invalidValue, detail: "before")])
        let mark = out.mark
        out.append(Self.records[1])
        out.append(output: "o", key: nil, dedupeKey: { $0.append("z") }, value: { $0.int(3) })
        out.fail(DecodeFailure(field: "g", reason: .invalidValue, detail: "after"))
        out.discard(since: mark)
        #expect(out.records == [Self.records[0]])
        #expect(out.failures.map(\.detail) == ["before"])
        out.append(Self.records[2])
        #expect(out.records == [Self.records[0], Self.records[2]], "writes after a discard land where the discarded ones were")
    }

    /// The runtime shares one output across a batch: a list that fails part way through takes
    /// back its own ticks and nothing of the inputs before it.
    @Test func aListFailingPartWayLeavesEarlierInputsAlone() {
        let stage = PriceDecodeTransform()
        var state = NoState()
        var out = TransformOutput()
        let origin = RecordOrigin(topic: "t", partition: 0, offset: 0)
        let good = InputRecord(value: Array("[\(tick(price: 1, at: 1_000)),\(tick("KRW-ETH", price: 2, at: 1_001))]".utf8), timestamp: 1, origin: origin)
        stage.process(good, state: &state, context: TransformContext(now: 1), into: &out)
        let before = out.records
        #expect(before.count == 2)
        var badOrigin = origin
        badOrigin.offset = 1
        let bad = InputRecord(value: Array("[\(tick(price: 3, at: 1_002)),\(tick(price: -1, at: 1_003))]".utf8), timestamp: 2, origin: badOrigin)
        stage.process(bad, state: &state, context: TransformContext(now: 2), into: &out)
        #expect(out.records == before, "the failing list's first tick is taken back, the earlier input's ticks stay")
        #expect(out.failures.count == 1)
        stage.process(good, state: &state, context: TransformContext(now: 3), into: &out)
        #expect(out.records == before + before)
    }

    /// The same stage over one shared output writes what it writes input by input.
    @Test func aSharedOutputHoldsWhatSeparateOnesHold() {
        let stage = PriceDecodeTransform().then(CandleTransform(allowedLatenessMillis: 0))
        var shared = TransformOutput()
        var separate = TransformOutput()
        var sharedState = stage.initialState
        var separateState = stage.initialState
        for i in 0..<200 {
            let value = i % 17 == 16 ? "{not json" : tick(["KRW-BTC", "KRW-ETH"][i % 2], price: Double(100 + i), at: minute0 + Int64(i) * 7_000)
            let input = InputRecord(
                key: Array("k\(i % 3)".utf8), value: Array(value.utf8), timestamp: Int64(i),
                origin: RecordOrigin(topic: "t", partition: 0, offset: Int64(i)))
            stage.process(input, state: &sharedState, context: TransformContext(now: Int64(i)), into: &shared)
            separate.append(contentsOf: stage.process(input, state: &separateState, context: TransformContext(now: Int64(i))))
        }
        #expect(shared.count > 0)
        #expect(shared.failures.count == 11)
        #expect(shared == separate)
    }
}
