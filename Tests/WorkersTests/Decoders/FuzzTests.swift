import Testing
import Workers
import WorkersTesting

/// Garbage at every decoder and at the stateful transforms: mutated real samples (byte flips,
/// truncations, splices, deep nesting), random bytes and pathological shapes. Decoding returns a
/// value or a failure and never crashes or hangs; a crash takes the whole test process down, so
/// these tests fail loudly. One suite, one mutator, a family of decoders per argument.
@Suite struct FuzzTests {
    /// Decoders tried together on the same bytes, with the samples their mutations start from.
    enum Family: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// Prices, products, campaigns and push notifications.
        case core
        /// Hangouts and challenges.
        case apps

        var testDescription: String { rawValue }

        var seeds: [String] {
            switch self {
            case .core: [
                Fixtures.upbitDefault, Fixtures.upbitSimple, Fixtures.upbitREST, Fixtures.productPageOld,
                Fixtures.productPageNew, Fixtures.productDetail, "[\(Fixtures.campaign()),\(Fixtures.campaign(id: 7))]",
                #"{"token":"t","title":"a","body":"b","data":{"k":"v"},"collapse_key":"c","dedupe_key":"d"}"#,
            ]
            case .apps: [
                AppFixtures.hangoutEnvelope, AppFixtures.hangout(),
                #"{"status":"OK","message":"ok","data":{"HangoutList":[\#(AppFixtures.hangout()),\#(AppFixtures.hangout(id: "h-2"))],"pageInfo":{"totalCount":2}}}"#,
                AppFixtures.join("h-1", "u1"), #"[{"locationID":1,"latitude":35.1,"longitude":129.1,"isSelected":true}]"#,
                #"{"method":"PUT","path":"notification","form":{"hangoutNoti":"true","newHangoutNoti":false}}"#,
                AppFixtures.challenge, AppFixtures.record, "[\(AppFixtures.challenge),\(AppFixtures.record)]",
                #"{"id":43,"userId":"9","title":"Coffee","targetMoney":"10000","categoryId":"2","startDate":"24.03.04"}"#,
                #"{"recordId":"311","challengeId":"42","userId":"9","title":"Bus","cost":"1450","image[]":"https://f/a","date":"24.03.06"}"#,
                #"{"method":"POST","path":"challenges/apply/42/9"}"#,
            ]
            }
        }

        /// The seeds of the mutation and random-byte runs (kept per family: the inputs stay those
        /// the suites had when they were two).
        var mutationSeed: UInt64 { self == .core ? 0xC0FFEE : 0xBA99 }
        var randomSeed: UInt64 { self == .core ? 7 : 11 }
        var alphabet: [UInt8] {
            (self == .core ? Array(#"{}[]":,.-+eE0123456789 \nulltruefalse"\u00"#.utf8) : Array(#"{}[]":,.-+eE0123456789 \nulltruefalse"\u00/"#.utf8))
                + [0x00, 0xFF, 0xC3, 0x80]
        }

        /// How many of the family's decoders accepted the bytes.
        func decodeAll(_ bytes: [UInt8]) -> Int {
            var outcomes = 0
            switch self {
            case .core:
                if (try? PriceTickDecoder().decode(bytes)) != nil { outcomes += 1 }
                if (try? ProductDecoder().decode(bytes)) != nil { outcomes += 1 }
                if (try? CampaignDecoder().decode(bytes)) != nil { outcomes += 1 }
                if (try? NotificationDecoder().decode(bytes)) != nil { outcomes += 1 }
            case .apps:
                if (try? HangoutDecoder().decode(bytes, user: "u1")) != nil { outcomes += 1 }
                if (try? HangoutDecoder().decode(bytes)) != nil { outcomes += 1 }
                if (try? ChallengeDecoder().decode(bytes)) != nil { outcomes += 1 }
            }
            return outcomes
        }

        /// Shapes that stress depth, length and number parsing.
        var shapes: [String] {
            switch self {
            case .core: [
                String(repeating: "[", count: 100_000), String(repeating: "{\"a\":", count: 50_000),
                "[" + String(repeating: "1,", count: 20_000) + "1]", "\"" + String(repeating: "\\", count: 10_001),
                String(repeating: "9", count: 5000), "-" + String(repeating: "0", count: 3000) + ".5e99999999999",
                "{\"code\":\"" + String(repeating: "\\ud800", count: 100) + "\"}", "\u{FEFF}{}", "nul", "tru", "[1,]", "{\"a\"}",
            ]
            case .apps: [
                String(repeating: "[", count: 100_000), String(repeating: #"{"data":"#, count: 50_000),
                String(repeating: #"{"place":"#, count: 50_000), String(repeating: #"{"form":"#, count: 50_000),
                #"{"status":"OK","data":{"HangoutList":["# + String(repeating: "{},", count: 20_000) + "{}]}}",
                #"{"hangoutJoinUserId":["# + String(repeating: #""u","#, count: 20_000) + #""u"]}"#,
                #"{"method":"PUT","path":""# + String(repeating: "/", count: 10_000) + #""}"#,
                #"{"hangoutMeetTime":"9999-12-31 23:59","hangoutInfoId":"x"}"#, #"{"startDate":"99.99.99","id":1}"#,
                #"{"cost":1e400}"#, #"{"cost":"99999999999999999999"}"#, "\u{FEFF}[]", "nul", "[1,]",
            ]
            }
        }
    }

    /// A sample with one to six random edits: a byte replaced, the tail cut, a byte inserted or
    /// removed, or a slice of itself spliced in.
    static func mutate(_ sample: String, alphabet: [UInt8], _ rng: inout SplitMix64) -> [UInt8] {
        var bytes = Array(sample.utf8)
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
        return bytes
    }

    @Test(arguments: Family.allCases) func mutatedSamplesNeverCrash(_ family: Family) {
        var rng = SplitMix64(seed: family.mutationSeed)
        let seeds = family.seeds
        var decodedSomething = 0
        var failed = 0
        for round in 0..<6_000 {
            let n = family.decodeAll(Self.mutate(seeds[round % seeds.count], alphabet: family.alphabet, &rng))
            decodedSomething += n
            if n == 0 { failed += 1 }
        }
        // Sanity: the mutations really produced both outcomes.
        #expect(decodedSomething > 0)
        #expect(failed > 0)
    }

    @Test(arguments: Family.allCases) func randomBytesAndPathologicalShapesNeverCrash(_ family: Family) {
        var rng = SplitMix64(seed: family.randomSeed)
        for _ in 0..<3_000 {
            let n = Int(rng.next() % 200)
            let bytes = (0..<n).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            // Random bytes are never a valid record of any app: accepting one would be a bug.
            #expect(family.decodeAll(bytes) == 0, "accepted \(bytes)")
        }
        for shape in family.shapes {
            let accepted = family.decodeAll(Array(shape.utf8))
            // The core decoders reject every shape; the app decoders may accept a few (a lone
            // upsert with an extreme date): any outcome but a crash.
            if family == .core { #expect(accepted == 0, "\(shape.prefix(30))") }
        }
    }

    /// The stages too (state, time arithmetic), on garbage and on extreme clocks.
    @Test func stagesSurviveMutatedStreams() throws {
        var rng = SplitMix64(seed: 99)
        for name in ["hangouts.decode", "hangouts.notifications", "challenges.decode", "challenges.standings",
                     "challenges.notifications", "challenges.thumbnails"] {
            let stage = try TransformCatalog().transform(named: name)
            try run(stage, &rng)
        }
    }

    private func run<S: Transform>(_ stage: S, _ rng: inout SplitMix64) throws {
        var driver = TestDriver(stage, partitions: 2)
        for round in 0..<600 {
            var bytes = Array(Family.apps.seeds[round % Family.apps.seeds.count].utf8)
            if rng.next() % 2 == 0, !bytes.isEmpty { bytes[Int(rng.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: rng.next()) }
            let t = [Int64.min, -1, 0, AppFixtures.day0, AppFixtures.meet, Int64.max][Int(rng.next() % 6)]
            driver.send(key: Array("h-1".utf8), value: bytes, headers: [RecordHeader("user-id", "u1")], timestamp: t)
            if round % 50 == 0 { driver.advance(to: t) }
        }
        #expect(driver.delivered.count == 600)
    }
}
