import Foundation
import PropertyBased
import Testing
import Workers
import WorkersTesting

@Suite struct ChallengeTransformTests {
    let day0 = AppFixtures.day0
    let day = AppFixtures.day
    let hour = AppFixtures.hour

    static func date(_ offset: Int) -> String { CalendarDay(year: 2024, month: 3, day: 4)!.adding(days: offset).description }

    /// Challenge 42 (leader 7) joined by 9, then one record per user per day with these costs
    /// (nil: no record that day), each at noon.
    func week<S: Transform>(
        _ stage: S, leader: [Int?], competitor: [Int?], giveUpDay: Int? = nil
    ) -> TestDriver<S> {
        var d = TestDriver(stage, partitions: 1)
        d.send(key: "42", value: AppFixtures.challenge(), timestamp: day0 - 2 * day)
        d.send(key: "42", value: #"{"method":"POST","path":"challenges/apply/42/9"}"#, timestamp: day0 - day)
        var id = 300
        for dayIndex in 0..<7 {
            let noon = day0 + Int64(dayIndex) * day + 12 * hour
            for (user, costs) in [(7, leader), (9, competitor)] {
                guard let cost = costs[dayIndex] else { continue }
                id += 1
                d.send(key: "42", value: AppFixtures.record(id, user: user, cost: cost, date: Self.date(dayIndex)), timestamp: noon)
            }
            if giveUpDay == dayIndex { d.send(key: "user-9", value: #"{"method":"POST","path":"challenges/giveup/9"}"#, timestamp: noon + 1) }
        }
        return d
    }

    @Test func standingsGoldenAndEmittedOnlyOnChange() {
        var d = TestDriver(ChallengeStandingsTransform(), partitions: 1)
        d.send(key: "42", value: AppFixtures.challenge(), timestamp: day0 - day)
        d.send(key: "42", value: #"{"method":"POST","path":"challenges/apply/42/9"}"#, timestamp: day0 - hour)
        d.send(key: "42", value: AppFixtures.record(301, user: 7, cost: 5000, date: "2024-03-04"), timestamp: day0 + 10 * hour)
        d.send(key: "42", value: AppFixtures.record(302, user: 9, cost: 3000, date: "24.03.04"), timestamp: day0 + 11 * hour)
        #expect(d.outputs(named: "challenges.standings").count == 4)
        #expect(d.outputs.last?.keyString == "42")
        #expect(d.outputs.last?.valueString == """
            {"challengeId":42,"startDate":"2024-03-04","endDate":"2024-03-11","participants":[\
            {"userId":7,"totalCost":5000,"daysWithRecords":1,"daysWithoutRecords":0,"gaveUp":false},\
            {"userId":9,"totalCost":3000,"daysWithRecords":1,"daysWithoutRecords":0,"gaveUp":false}],"result":null}
            """)
        // Day one ends with records for both: nothing changed.
        #expect(d.advance(to: day0 + day + 1).records.isEmpty)
        // Day two ends without records: both have one day without.
        let next = d.advance(to: day0 + 2 * day)
        #expect(next.records.count == 1)
        #expect(next.records.first?.valueString?.contains(#""daysWithoutRecords":1"#) == true)
        // An edit of a record replaces it; a deletion removes it.
        d.send(key: "42", value: AppFixtures.record(301, user: 7, cost: 4000, date: "2024-03-04"), timestamp: day0 + 2 * day + 1)
        #expect(d.outputs.last?.valueString?.contains(#""userId":7,"totalCost":4000"#) == true)
        d.send(key: "record-302", value: #"{"method":"DELETE","path":"records/delete/302"}"#, timestamp: day0 + 2 * day + 2)
        #expect(d.outputs.last?.valueString?.contains(#""userId":9,"totalCost":0,"daysWithRecords":0,"daysWithoutRecords":2"#) == true)
        #expect(d.redeliver(from: 0).records.isEmpty)
    }

    func result(_ d: inout TestDriver<ChallengeStandingsTransform>) -> String? {
        #expect(d.advance(to: day0 + 7 * day - 1).records.allSatisfy { $0.output != "challenges.results" })
        let out = d.advance(to: day0 + 7 * day)
        let results = out.records.filter { $0.output == "challenges.results" }
        #expect(results.count == 1)
        #expect(results.first?.dedupeKey == "result:42")
        // Once: later time, redelivery and late records change nothing.
        #expect(d.advance(to: day0 + 8 * day).records.isEmpty)
        #expect(d.redeliver(from: 0).records.isEmpty)
        #expect(d.send(key: "42", value: AppFixtures.record(999, user: 7, cost: 1, date: Self.date(6)), timestamp: day0 + 8 * day).records.isEmpty)
        guard let v = results.first?.valueString, let r = v.range(of: #""result":"#) else { return nil }
        return String(v[r.upperBound...].dropLast())
    }

    @Test func lowerTotalWins() {
        var d = week(ChallengeStandingsTransform(), leader: Array(repeating: 1000, count: 7), competitor: Array(repeating: 2000, count: 7))
        #expect(result(&d) == #"{"kind":"decided","winnerId":7,"reason":"lower-total"}"#)
    }

    @Test func equalTotalsTie() {
        var d = week(ChallengeStandingsTransform(), leader: [1000, 0, 0, 0, 0, 0, 6000], competitor: [0, 0, 0, 0, 7000, 0, 0])
        #expect(result(&d) == #"{"kind":"tie","winnerId":-1,"reason":"equal-total"}"#)
    }

    @Test func givingUpLosesWhateverTheTotals() {
        var d = week(ChallengeStandingsTransform(), leader: Array(repeating: 9000, count: 7), competitor: [0, 0, 0, nil, nil, nil, nil], giveUpDay: 3)
        #expect(result(&d) == #"{"kind":"decided","winnerId":7,"reason":"gave-up"}"#)
    }

    @Test func threeDaysWithoutRecordsLosesTwoDoNot() {
        var lose = week(ChallengeStandingsTransform(), leader: Array(repeating: 9000, count: 7), competitor: [0, nil, 0, nil, 0, nil, 0])
        #expect(result(&lose) == #"{"kind":"decided","winnerId":7,"reason":"missing-records"}"#)
        var keep = week(ChallengeStandingsTransform(), leader: Array(repeating: 9000, count: 7), competitor: [0, nil, 0, nil, 0, 0, 0])
        #expect(result(&keep) == #"{"kind":"decided","winnerId":9,"reason":"lower-total"}"#)
        var both = week(ChallengeStandingsTransform(), leader: [nil, nil, nil, 0, 0, 0, 0], competitor: [0, nil, nil, nil, 0, 0, 0])
        #expect(result(&both) == #"{"kind":"both-lost","winnerId":null,"reason":"missing-records"}"#)
    }

    /// The result is taken at the term's end in event time: a record processed after it does not
    /// count, whether or not `advance` ran in between.
    @Test func recordsProcessedAfterTheEndDoNotCount() {
        for tick in [false, true] {
            var d = week(ChallengeStandingsTransform(), leader: Array(repeating: 1000, count: 7), competitor: Array(repeating: 1500, count: 7))
            if tick { d.advance(to: day0 + 7 * day) }
            // Dated on the last day, but processed after midnight: too late to change the winner.
            d.send(key: "42", value: AppFixtures.record(900, user: 7, cost: 50_000, date: Self.date(6)), timestamp: day0 + 7 * day + 1)
            d.advance(to: day0 + 7 * day + 2)
            let results = d.outputs(named: "challenges.results")
            #expect(results.count == 1)
            #expect(results.first?.valueString?.contains(#""totalCost":7000"#) == true)
            #expect(results.first?.valueString?.contains(#""winnerId":7,"reason":"lower-total""#) == true)
        }
    }

    @Test func unmatchedAndEviction() throws {
        var d = TestDriver(ChallengeStandingsTransform(retainMillis: day), partitions: 1)
        d.send(key: "42", value: AppFixtures.challenge(), timestamp: day0 - day)
        let out = d.advance(to: day0 + 7 * day)
        #expect(out.records.last?.valueString?.hasSuffix(#""result":{"kind":"unmatched","winnerId":null,"reason":"no-competitor"}}"#) == true)
        let restored = try JSONDecoder().decode(ChallengeStandingsTransform.State.self, from: JSONEncoder().encode(d.state))
        #expect(restored == d.state)
        d.advance(to: day0 + 8 * day + 1)
        #expect(d.state.book.entries.isEmpty)
        #expect(d.state.emitted.isEmpty)
    }

    /// Property: the standings (and the result) never depend on the order of records within a day.
    @Test func standingsNeverDependOnRecordOrderWithinADay() async {
        let gen = zip(Gen.int(in: 0...1), Gen.int(in: 0...6), Gen.int(in: 0...20_000), Gen.int(in: 0...1_000)).array(of: 0...40)
        await propertyCheck(count: 200, input: gen) { rows in
            func run(_ order: [Int]) -> (ChallengeStandings?, [String]) {
                let stage = ChallengeStandingsTransform()
                var d = TestDriver(stage, partitions: 1)
                d.send(key: "42", value: AppFixtures.challenge(competitor: 9), timestamp: day0 - day)
                for i in order {
                    let (user, dayIndex, cost, _) = rows[i]
                    d.send(
                        key: "42", value: AppFixtures.record(1000 + i, user: user == 0 ? 7 : 9, cost: cost, date: Self.date(dayIndex)),
                        timestamp: day0 + Int64(dayIndex) * day + 8 * hour)
                }
                d.advance(to: day0 + 7 * day)
                return (stage.standings(42, in: d.state), d.outputs(named: "challenges.results").compactMap(\.valueString))
            }
            let byArrival = Array(rows.indices).sorted { rows[$0].1 < rows[$1].1 }
            let shuffled = Array(rows.indices).sorted { (rows[$0].1, rows[$0].3, $0) < (rows[$1].1, rows[$1].3, $1) }
            let (a, ra) = run(byArrival)
            let (b, rb) = run(shuffled)
            #expect(a == b)
            #expect(ra == rb)
            #expect(ra.count == 1)
            let total = rows.filter { $0.0 == 0 }.reduce(0) { $0 + $1.2 }
            #expect(a?.participants.first?.totalCost == Int64(total))
        }
    }

    // MARK: Notifications

    @Test func matchedNotificationInTheAppsFCMShape() throws {
        var d = TestDriver(ChallengeNotificationTransform().then(NotificationRenderTransform()), partitions: 1)
        d.send(key: "42", value: AppFixtures.challenge(), timestamp: day0 - 2 * day)
        #expect(d.outputs.isEmpty)
        d.send(key: "42", value: #"{"method":"POST","path":"challenges/apply/42/9"}"#, timestamp: day0 - day)
        let fcm = try #require(d.outputs(named: "notifications.fcm").first)
        #expect(fcm.valueString == """
            {"message":{"topic":"challenges-user-7","notification":{"title":"챌린지 현황",\
            "body":"'Lunchbox week' 챌린지에 상대가 참가했어요. 2024-03-04부터 시작해요."},\
            "data":{"userId":"7","dedupe_key":"challenge:42:matched:9"},"android":{"collapse_key":"challenge-42-matched"},\
            "apns":{"headers":{"apns-collapse-id":"challenge-42-matched"}}}}
            """)
        #expect(d.outputs(named: "notifications.apns").isEmpty, "a topic: FCM only")
        // A challenge first seen already matched was not seen being matched: no push.
        var late = TestDriver(ChallengeNotificationTransform(), partitions: 1)
        late.send(key: "43", value: AppFixtures.challenge(id: 43, competitor: 9), timestamp: day0 - day)
        #expect(late.outputs.isEmpty)
        // The object going from no competitor to one is a match too, once.
        var viaObject = TestDriver(ChallengeNotificationTransform(), partitions: 1)
        viaObject.send(key: "44", value: AppFixtures.challenge(id: 44), timestamp: day0 - 2 * day)
        viaObject.send(key: "44", value: AppFixtures.challenge(id: 44, competitor: 9), timestamp: day0 - day)
        viaObject.send(key: "44", value: #"{"method":"POST","path":"challenges/apply/44/9"}"#, timestamp: day0 - day + 1)
        #expect(viaObject.outputs.map(\.dedupeKey) == ["challenge:44:matched:9"])
        // The join may arrive before the challenge (another partition): the match is told when both are known.
        var joinFirst = TestDriver(ChallengeNotificationTransform(), partitions: 1)
        joinFirst.send(key: "45", value: #"{"method":"POST","path":"challenges/apply/45/9"}"#, timestamp: day0 - 2 * day)
        joinFirst.send(key: "45", value: AppFixtures.challenge(id: 45), timestamp: day0 - day)
        joinFirst.send(key: "45", value: AppFixtures.challenge(id: 45, competitor: 9), timestamp: day0 - day + 1)
        #expect(joinFirst.outputs.map(\.dedupeKey) == ["challenge:45:matched:9"])
    }

    @Test func dailyReminderForWhoeverHasNotRecordedAndResults() {
        var d = week(ChallengeNotificationTransform(), leader: [1000, nil, nil, nil, nil, nil, nil], competitor: Array(repeating: nil, count: 7))
        let before = d.outputs.count  // matched
        #expect(before == 1)
        d.advance(to: day0 + 21 * hour - 1)
        #expect(d.outputs.count == before)
        let first = d.advance(to: day0 + 21 * hour)
        #expect(first.records.map(\.dedupeKey) == ["challenge:42:reminder:9:2024-03-04"])
        #expect(d.advance(to: day0 + 23 * hour).records.isEmpty)
        let second = d.advance(to: day0 + day + 22 * hour)
        #expect(second.records.map(\.dedupeKey) == ["challenge:42:reminder:7:2024-03-05", "challenge:42:reminder:9:2024-03-05"])
        #expect(second.records.first?.valueString?.contains(#""title":"챌린지 현황","body":"오늘의 지출을 기록해 주세요. 기록 없는 날이 3일이면 패배해요.","data":{"userId":"7"}"#) == true)
        let end = d.advance(to: day0 + 7 * day)
        let results = end.records.filter { $0.dedupeKey.contains(":result:") }
        #expect(results.map(\.dedupeKey) == ["challenge:42:result:7", "challenge:42:result:9"])
        #expect(results.map(\.keyString) == ["topic:challenges-user-7", "topic:challenges-user-9"])
        // Both missed three days or more: both lose.
        #expect(results.allSatisfy { $0.valueString?.contains("아쉽게 패배했어요") == true && $0.valueString?.contains("챌린지 결과") == true })
        #expect(d.advance(to: day0 + 8 * day).records.isEmpty)
        #expect(d.redeliver(from: 0).records.isEmpty)
    }

    @Test func winnerAndLoserHearTheirOwnOutcomeAndQuittersGetNoReminders() {
        var d = week(ChallengeNotificationTransform(), leader: Array(repeating: 9000, count: 7), competitor: [0, 0, 0, nil, nil, nil, nil], giveUpDay: 3)
        let reminders = (3..<7).flatMap { i in d.advance(to: day0 + Int64(i) * day + 22 * hour).records }
        #expect(reminders.isEmpty)
        let out = d.advance(to: day0 + 7 * day).records
        #expect(out.map(\.dedupeKey) == ["challenge:42:result:7", "challenge:42:result:9"])
        #expect(out.first?.valueString?.contains("승리했어요") == true)
        #expect(out.last?.valueString?.contains("패배했어요") == true)
    }

    /// Property: a reminder (challenge, user, day) is never sent twice, whatever the records,
    /// clock ticks and redeliveries.
    @Test func aReminderIsNeverSentTwice() async {
        let gen = zip(Gen.int(in: 0...3), Gen.int(in: 0...1), Gen.int(in: 0...600)).array(of: 1...50)
        await propertyCheck(count: 150, input: gen) { steps in
            var d = TestDriver(ChallengeNotificationTransform(), partitions: 1)
            d.send(key: "42", value: AppFixtures.challenge(), timestamp: day0 - day)
            d.send(key: "42", value: #"{"method":"POST","path":"challenges/apply/42/9"}"#, timestamp: day0 - day + 1)
            var t = day0
            var id = 0
            for (op, user, minutes) in steps {
                t += Int64(minutes) * 60_000 / 2
                let dayIndex = Int((t - day0) / day)
                switch op {
                case 0 where dayIndex < 8:
                    id += 1
                    d.send(key: "42", value: AppFixtures.record(id, user: user == 0 ? 7 : 9, cost: 100, date: Self.date(dayIndex)), timestamp: t)
                case 1: d.advance(to: t)
                case 2: d.redeliver(from: max(0, d.delivered.count - 4))
                default: d.advance(to: t + 12 * hour)
                }
            }
            d.advance(to: day0 + 8 * day)
            let keys = d.outputs.map(\.dedupeKey)
            #expect(Set(keys).count == keys.count, "\(keys)")
        }
    }

    // MARK: Thumbnails

    @Test func spendingProofImagesBecomeThumbnailRequests() {
        var d = TestDriver(ChallengeThumbnailTransform(), partitions: 1)
        d.send(key: "42", value: AppFixtures.record(310, user: 9, cost: 8500, date: "2024-03-05", images: 2), timestamp: 1)
        #expect(d.outputs.count == 2)
        #expect(Set(d.outputs.map(\.output)) == ["thumbnails.requests"])
        #expect(d.outputs.first?.keyString == "record-310")
        let first = d.outputs.first?.valueString ?? ""
        #expect(first.hasPrefix(#"{"owner":"record","owner_id":"310","image_index":0,"source_url":"https://files.example/r310-0","dedupe_key":"thumb:record:310:0:"#))
        // An edit with the same images asks for the same thumbnails; a hidden record for none.
        let again = d.send(key: "42", value: AppFixtures.record(310, user: 9, cost: 9000, date: "2024-03-05", images: 2), timestamp: 2)
        #expect(again.records.map(\.dedupeKey) == Array(d.outputs.prefix(again.records.count)).map(\.dedupeKey))
        let hidden = AppFixtures.record(311, user: 9, cost: 1, date: "2024-03-05").replacingOccurrences(of: #""hide":false"#, with: #""hide":true"#)
        #expect(d.send(key: "42", value: hidden, timestamp: 3).records.isEmpty)
        #expect(d.send(key: "42", value: AppFixtures.challenge(), timestamp: 4).records.isEmpty)
    }

    @Test func decodeStageGolden() {
        var d = TestDriver(ChallengeDecodeTransform(), topic: "igomoney", partitions: 1)
        d.send(value: "[\(AppFixtures.challenge),\(AppFixtures.record)]", timestamp: 1)
        d.send(value: #"{"method":"POST","path":"challenges/giveup/9"}"#, timestamp: 2)
        d.send(key: "x", value: nil, timestamp: 3)
        d.send(value: #"{"id":1,"leaderId":2,"title":"t","targetAmount":1,"categoryId":9,"startDate":"2024-03-04"}"#, timestamp: 4)
        #expect(d.outputs.map(\.keyString) == ["42", "42", "user-9"])
        #expect(d.outputs.map(\.dedupeKey) == [
            "challenge:challenge:42:igomoney/0/0#0", "challenge:record:42:igomoney/0/0#1", "challenge:gave-up:user-9:igomoney/0/1#0",
        ])
        #expect(d.outputs.map { $0.headers.string(named: "event-type") } == ["challenge", "record", "gave-up"])
        #expect(d.deadLetters.map(\.failure) == [DecodeFailure(field: "categoryId", reason: .invalidValue, detail: "expected 1 to 5, got 9")])
        // Chained into the standings, the normalised events say the same as the raw ones.
        var chained = TestDriver(ChallengeDecodeTransform().then(ChallengeStandingsTransform()), partitions: 1)
        var direct = TestDriver(ChallengeStandingsTransform(), partitions: 1)
        for r in d.delivered { chained.deliver(r); direct.deliver(r) }
        // (The chain sees the array's two events as two records, so it may emit one more snapshot.)
        #expect(chained.outputs.last?.valueString == direct.outputs.last?.valueString)
        #expect(ChallengeStandingsTransform().standings(42, in: chained.state.second) == ChallengeStandingsTransform().standings(42, in: direct.state))
        #expect(chained.redeliver(from: 0).records.isEmpty)
    }
}
