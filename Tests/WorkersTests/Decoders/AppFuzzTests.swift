import Testing
import Workers
import WorkersTesting

/// Garbage at the hangout and challenge decoders and stages: mutated samples and random bytes
/// must give a value or a failure, never a crash or a hang.
@Suite struct AppFuzzTests {
    static let seeds: [String] = [
        AppFixtures.hangoutEnvelope, AppFixtures.hangout(),
        #"{"status":"OK","message":"ok","data":{"HangoutList":[\#(AppFixtures.hangout()),\#(AppFixtures.hangout(id: "h-2"))],"pageInfo":{"totalCount":2}}}"#,
        AppFixtures.join("h-1", "u1"), #"[{"locationID":1,"latitude":35.1,"longitude":129.1,"isSelected":true}]"#,
        #"{"method":"PUT","path":"notification","form":{"hangoutNoti":"true","newHangoutNoti":false}}"#,
        AppFixtures.challenge, AppFixtures.record, "[\(AppFixtures.challenge),\(AppFixtures.record)]",
        #"{"id":43,"userId":"9","title":"Coffee","targetMoney":"10000","categoryId":"2","startDate":"24.03.04"}"#,
        #"{"recordId":"311","challengeId":"42","userId":"9","title":"Bus","cost":"1450","image[]":"https://f/a","date":"24.03.06"}"#,
        #"{"method":"POST","path":"challenges/apply/42/9"}"#,
    ]

    private func decodeAll(_ bytes: [UInt8]) -> Int {
        var outcomes = 0
        if (try? HangoutDecoder().decode(bytes, user: "u1")) != nil { outcomes += 1 }
        if (try? HangoutDecoder().decode(bytes)) != nil { outcomes += 1 }
        if (try? ChallengeDecoder().decode(bytes)) != nil { outcomes += 1 }
        return outcomes
    }

    @Test func mutatedSamplesNeverCrash() {
        var rng = SplitMix64(seed: 0xBA99)
        let alphabet = Array(#"{}[]":,.-+eE0123456789 \nulltruefalse"\u00/"#.utf8) + [0x00, 0xFF, 0xC3, 0x80]
        var decoded = 0
        var failed = 0
        for round in 0..<6_000 {
            var bytes = Array(Self.seeds[round % Self.seeds.count].utf8)
            let edits = Int(rng.next() % 6) + 1
            for _ in 0..<edits where !bytes.isEmpty {
                let at = Int(rng.next() % UInt64(bytes.count))
                switch rng.next() % 5 {
                case 0: bytes[at] = alphabet[Int(rng.next() % UInt64(alphabet.count))]
                case 1: bytes.removeSubrange(at...)
                case 2: bytes.insert(alphabet[Int(rng.next() % UInt64(alphabet.count))], at: at)
                case 3: bytes.remove(at: at)
                default:
                    let from = Int(rng.next() % UInt64(bytes.count))
                    let len = min(Int(rng.next() % 40), bytes.count - from)
                    bytes.insert(contentsOf: bytes[from..<(from + len)], at: at)
                }
            }
            let n = decodeAll(bytes)
            decoded += n
            if n == 0 { failed += 1 }
        }
        #expect(decoded > 0)
        #expect(failed > 0)
    }

    @Test func randomBytesAndPathologicalShapesNeverCrash() {
        var rng = SplitMix64(seed: 11)
        for _ in 0..<3_000 {
            let n = Int(rng.next() % 200)
            let bytes = (0..<n).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            #expect(decodeAll(bytes) == 0, "accepted \(bytes)")
        }
        let shapes: [String] = [
            String(repeating: "[", count: 100_000), String(repeating: #"{"data":"#, count: 50_000),
            String(repeating: #"{"place":"#, count: 50_000), String(repeating: #"{"form":"#, count: 50_000),
            #"{"status":"OK","data":{"HangoutList":["# + String(repeating: "{},", count: 20_000) + "{}]}}",
            #"{"hangoutJoinUserId":["# + String(repeating: #""u","#, count: 20_000) + #""u"]}"#,
            #"{"method":"PUT","path":""# + String(repeating: "/", count: 10_000) + #""}"#,
            #"{"hangoutMeetTime":"9999-12-31 23:59","hangoutInfoId":"x"}"#, #"{"startDate":"99.99.99","id":1}"#,
            #"{"cost":1e400}"#, #"{"cost":"99999999999999999999"}"#, "\u{FEFF}[]", "nul", "[1,]",
        ]
        for shape in shapes {
            _ = decodeAll(Array(shape.utf8))  // any outcome but a crash
        }
    }

    /// The stages too (state, time arithmetic), on garbage and on extreme clocks.
    @Test func stagesSurviveMutatedStreams() throws {
        var rng = SplitMix64(seed: 99)
        for name in ["hangouts.decode", "hangouts.notifications", "challenges.decode", "challenges.standings",
                     "challenges.notifications", "challenges.thumbnails"] {
            let stage = try TransformCatalog().stage(named: name)
            try run(stage, &rng)
        }
    }

    private func run<S: Transform>(_ stage: S, _ rng: inout SplitMix64) throws {
        var driver = TestDriver(stage, partitions: 2)
        for round in 0..<600 {
            var bytes = Array(Self.seeds[round % Self.seeds.count].utf8)
            if rng.next() % 2 == 0, !bytes.isEmpty { bytes[Int(rng.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: rng.next()) }
            let t = [Int64.min, -1, 0, AppFixtures.day0, AppFixtures.meet, Int64.max][Int(rng.next() % 6)]
            driver.send(key: Array("h-1".utf8), value: bytes, headers: [RecordHeader("user-id", "u1")], timestamp: t)
            if round % 50 == 0 { driver.advance(to: t) }
        }
        #expect(driver.delivered.count == 600)
    }
}
