import Testing
import Workers

@Suite struct ChallengeDecoderTests {
    let decoder = ChallengeDecoder()

    func one(_ text: String) throws -> ChallengeEvent {
        let events = try decoder.decode(Fixtures.bytes(text))
        try #require(events.count == 1)
        return events[0]
    }

    static let march4 = CalendarDay(year: 2024, month: 3, day: 4)!

    @Test func formatsExamplesGolden() throws {
        let challenge = Challenge(
            id: 42, leaderId: 7, competitorId: 9, title: "Lunchbox week", content: "Cook at home", targetAmount: 30000,
            category: .food, startDate: Self.march4, term: 7)
        #expect(try one(AppFixtures.challenge) == .challenge(challenge))
        #expect(Self.march4.daysSinceEpoch == 19786)
        #expect(challenge.endDay.description == "2024-03-11")
        #expect(challenge.endDay.startMillis(offsetSeconds: 9 * 3600) == AppFixtures.day0 + 7 * AppFixtures.day)
        let record = SpendingRecord(
            recordId: 310, challengeId: 42, userId: 9, title: "Groceries", content: "Rice and eggs", cost: 8500,
            images: ["https://files.example/5e6f"], date: Self.march4.adding(days: 1), hidden: false)
        #expect(try one(AppFixtures.record) == .record(record))
        #expect(String(decoding: challenge.jsonBytes(), as: UTF8.self) == """
            {"id":42,"leaderId":7,"competitorId":9,"title":"Lunchbox week","content":"Cook at home","targetAmount":30000,\
            "categoryId":2,"startDate":"2024-03-04","term":7}
            """)
        #expect(String(decoding: record.jsonBytes(), as: UTF8.self) == """
            {"recordId":310,"challengeId":42,"userId":9,"title":"Groceries","content":"Rice and eggs","cost":8500,\
            "image":["https://files.example/5e6f"],"date":"2024-03-05","hide":false}
            """)
        // Both read back, as does a bare array of them.
        #expect(try decoder.decode(challenge.jsonBytes()) == [.challenge(challenge)])
        #expect(try decoder.decode(Fixtures.bytes("[\(AppFixtures.challenge),\(AppFixtures.record)]")) == [.challenge(challenge), .record(record)])
    }

    @Test func clientDateFormatAndFieldNamesAreAccepted() throws {
        // The iOS client's `yy.MM.dd`, `image[]` with one URL, form numbers as strings.
        let client = #"{"recordId":"311","challengeId":"42","userId":"9","title":"Bus","cost":"1450","image[]":"https://files.example/a","date":"24.03.06"}"#
        guard case .record(let r) = try one(client) else { Issue.record("not a record"); return }
        #expect(r.date == Self.march4.adding(days: 2))
        #expect(r.images == ["https://files.example/a"])
        #expect(r.cost == 1450)
        #expect(r.recordId == 311)
        // The create form: `userId` is the leader, `targetMoney` the amount, term defaults to 7.
        let form = #"{"id":43,"userId":"9","title":"Coffee break","content":"Tumbler only","targetMoney":"10000","categoryId":"2","startDate":"24.03.04"}"#
        #expect(try one(form) == .challenge(Challenge(
            id: 43, leaderId: 9, title: "Coffee break", content: "Tumbler only", targetAmount: 10000, category: .food,
            startDate: Self.march4)))
    }

    @Test func pathOnlyRequests() throws {
        #expect(try one(#"{"method":"POST","path":"challenges/apply/42/9"}"#) == .joined(challengeId: 42, userId: 9))
        #expect(try one(#"{"method":"post","path":"/challenges/giveup/9/"}"#) == .gaveUp(userId: 9))
        #expect(try one(#"{"method":"DELETE","path":"records/delete/310"}"#) == .recordDeleted(recordId: 310))
        for e in [ChallengeEvent.joined(challengeId: 1, userId: 2), .gaveUp(userId: 3), .recordDeleted(recordId: 4)] {
            #expect(try decoder.decode(e.jsonBytes()) == [e])
        }
    }

    struct Bad: Sendable, CustomTestStringConvertible {
        var text: String, field: String, reason: DecodeFailure.Reason
        init(_ text: String, _ field: String, _ reason: DecodeFailure.Reason) { (self.text, self.field, self.reason) = (text, field, reason) }
        var testDescription: String { field }
    }

    static let invalid: [Bad] = {
        var cases: [Bad] = []
        cases += [
            Bad(AppFixtures.challenge.replacingOccurrences(of: #""categoryId":2"#, with: #""categoryId":6"#), "categoryId", .invalidValue),
            Bad(AppFixtures.challenge.replacingOccurrences(of: #""categoryId":2"#, with: #""categoryId":0"#), "categoryId", .invalidValue),
            Bad(AppFixtures.challenge.replacingOccurrences(of: #""targetAmount":30000"#, with: #""targetAmount":-10000"#), "targetAmount", .invalidValue),
            Bad(AppFixtures.challenge.replacingOccurrences(of: #""targetAmount":30000"#, with: #""targetAmount":30000.5"#), "targetAmount", .wrongType),
            Bad(AppFixtures.challenge.replacingOccurrences(of: #""startDate":"2024-03-04""#, with: #""startDate":"2024/03/04""#), "startDate", .invalidValue),
            Bad(AppFixtures.challenge.replacingOccurrences(of: #""startDate":"2024-03-04""#, with: #""startDate":"2023-02-29""#), "startDate", .invalidValue),
            Bad(AppFixtures.challenge.replacingOccurrences(of: #""term":7"#, with: #""term":0"#), "term", .invalidValue),
            Bad(AppFixtures.challenge.replacingOccurrences(of: #""competitorId":9"#, with: #""competitorId":7"#), "competitorId", .invalidValue),
            Bad(AppFixtures.challenge.replacingOccurrences(of: #""leaderId":7,"#, with: ""), "leaderId", .missingField),
            Bad(AppFixtures.record.replacingOccurrences(of: #""cost":8500"#, with: #""cost":-1"#), "cost", .invalidValue),
            Bad(AppFixtures.record.replacingOccurrences(of: #""cost":8500"#, with: #""cost":"8,500""#), "cost", .invalidValue),
            Bad(AppFixtures.record.replacingOccurrences(of: #""date":"2024-03-05""#, with: #""date":"24.3.5""#), "date", .invalidValue),
            Bad(AppFixtures.record.replacingOccurrences(of: #""https://files.example/5e6f""#, with: #""5e6f.jpg""#), "image[0]", .invalidValue),
            Bad(AppFixtures.record.replacingOccurrences(of: #""userId":9,"#, with: ""), "userId", .missingField),
            // The client's edit puts the challenge id into recordId: not guessed.
            Bad(#"{"method":"PATCH","path":"records/edit","form":{"recordId":"42","title":"x","cost":"1"}}"#, "recordId", .invalidValue),
            Bad(#"{"recordId":"42","title":"x","content":"y","cost":"9000"}"#, "challengeId", .missingField),
            Bad(#"{"method":"POST","path":"challenges/apply/42/abc"}"#, "path", .invalidValue),
            Bad(#"{"timestamp":"2024-03-04T10:00:00","status":400,"error":"Bad Request","code":"C001","detail":"x"}"#, "$", .invalidValue),
            Bad("[\(AppFixtures.challenge),{\"id\":1}]", "[1]", .invalidValue),
            Bad("[\(AppFixtures.challenge),\(AppFixtures.record.replacingOccurrences(of: "8500", with: "\"x\""))]", "[1].cost", .invalidValue),
        ]
        return cases
    }()

    @Test(arguments: invalid)
    func invalidMessagesFailNamingTheField(_ bad: Bad) {
        let (text, field, reason) = (bad.text, bad.field, bad.reason)
        let failure = expectFailure { () throws(DecodeFailure) in try decoder.decode(Fixtures.bytes(text)) }
        #expect(failure?.field == field, "\(String(describing: failure))")
        #expect(failure?.reason == reason, "\(String(describing: failure))")
    }
}
