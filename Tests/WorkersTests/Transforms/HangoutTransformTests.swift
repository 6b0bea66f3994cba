import Foundation
import PropertyBased
import Testing
import Workers
import WorkersTesting

@Suite struct HangoutTransformTests {
    let meet = AppFixtures.meet
    let hour = AppFixtures.hour

    @Test func decodeStageGolden() {
        var driver = TestDriver(HangoutDecodeTransform(), topic: "bappy", partitions: 1)
        driver.send(key: "h-91", value: AppFixtures.join("h-91", "u9"), timestamp: 1)
        driver.send(key: "u9", value: #"{"hangoutNoti":true,"newHangoutNoti":false}"#, headers: ["user-id": "u9"], timestamp: 2)
        driver.send(key: "h-91", value: nil, timestamp: 3)
        driver.send(value: #"{"status":"OK","message":"ok","data":true}"#, timestamp: 4)
        #expect(driver.outputs.map(\.output) == ["hangouts.events", "hangouts.events", "hangouts.events"])
        #expect(driver.outputs.map(\.keyString) == ["h-91", "u9", "h-91"])
        #expect(driver.outputs.map(\.valueString) == [
            #"{"method":"PUT","path":"hangout/h-91","userId":"u9","form":{"action":"join"}}"#,
            #"{"hangoutNoti":true,"newHangoutNoti":false}"#,
            nil,
        ])
        #expect(driver.outputs[1].headers == [RecordHeader("event-type", "settings"), RecordHeader("user-id", "u9")])
        #expect(driver.outputs[2].headers == [RecordHeader("event-type", "cancelled")])
        #expect(driver.outputs.map(\.dedupeKey) == [
            "hangout:join:h-91:bappy/0/0#0", "hangout:settings:u9:bappy/0/1#0", "hangout:cancelled:h-91:bappy/0/2#0",
        ])
        #expect(driver.deadLetters.map(\.failure.field) == ["data"])
        #expect(driver.deadLetters.first?.origin == RecordOrigin(topic: "bappy", partition: 0, offset: 3))
    }

    /// Users u1 (organiser), u2 joined; u5 and u6 have saved places near and far.
    func driverWithUsers(_ stage: HangoutNotificationTransform = HangoutNotificationTransform()) -> TestDriver<HangoutNotificationTransform> {
        var d = TestDriver(stage, partitions: 1)
        let t0 = meet - 3 * AppFixtures.day
        d.send(key: "u5", value: #"[{"locationID":1,"latitude":35.2301,"longitude":129.0812}]"#, headers: ["user-id": "u5"], timestamp: t0)
        d.send(key: "u6", value: #"[{"locationID":2,"latitude":35.10,"longitude":129.03}]"#, headers: ["user-id": "u6"], timestamp: t0)
        d.send(key: "u2", value: #"{"method":"PUT","path":"user/fcmToken","form":{"fcmToken":"tok-u2"}}"#, headers: ["user-id": "u2"], timestamp: t0)
        return d
    }

    @Test func newHangoutNearSavedPlacesHonoursRadiusAndSettings() {
        var d = driverWithUsers()
        d.send(key: "u7", value: #"[{"locationID":3,"latitude":35.231,"longitude":129.079}]"#, headers: ["user-id": "u7"], timestamp: 0)
        d.send(key: "u7", value: #"{"hangoutNoti":true,"newHangoutNoti":false}"#, headers: ["user-id": "u7"], timestamp: 0)
        let out = d.send(key: "h-91", value: AppFixtures.hangout(), timestamp: meet - 2 * AppFixtures.day)
        // u5 is ~100 m away; u6 ~15 km; u7 is near but turned these off; u1 and u2 are in it.
        #expect(out.records.map(\.keyString) == ["topic:hangouts-user-u5"])
        #expect(out.records.first?.valueString == """
            {"topic":"hangouts-user-u5","title":"New hangout near you","body":"Board games on Friday at Dice Cafe.",\
            "data":{"hangoutId":"h-91","kind":"nearby"},"collapse_key":"hangout-h-91-nearby","dedupe_key":"hangout:h-91:nearby:u5"}
            """)
        // Seen again: not new.
        #expect(d.send(key: "h-91", value: AppFixtures.hangout(), timestamp: meet - 2 * AppFixtures.day + 1).records.isEmpty)
        // A smaller radius leaves u5 out.
        var narrow = driverWithUsers(HangoutNotificationTransform(nearbyRadiusMeters: 50))
        #expect(narrow.send(key: "h-91", value: AppFixtures.hangout(), timestamp: meet - 2 * AppFixtures.day).records.isEmpty)
    }

    @Test func joinerNotifiesTheFirstJoinerAsOrganiser() {
        var d = driverWithUsers()
        d.send(key: "h-91", value: AppFixtures.hangout(joined: ["u1"]), timestamp: meet - 2 * AppFixtures.day)
        let before = d.outputs.count
        let join = d.send(key: "h-91", value: AppFixtures.join("h-91", "u2"), timestamp: meet - AppFixtures.day)
        #expect(join.records.count == 1)
        let n = join.records[0]
        #expect(n.keyString == "topic:hangouts-user-u1")
        #expect(n.valueString?.contains(#""data":{"hangoutId":"h-91","joinerId":"u2","kind":"joined","organiser":"first-joiner"}"#) == true)
        // The same joiner seen again in a later snapshot, or leaving and rejoining: no second push.
        d.send(key: "h-91", value: AppFixtures.hangout(joined: ["u1", "u2"]), timestamp: meet - AppFixtures.day + 1)
        d.send(key: "h-91", value: AppFixtures.join("h-91", "u2", "cancel"), timestamp: meet - AppFixtures.day + 2)
        d.send(key: "h-91", value: AppFixtures.join("h-91", "u2"), timestamp: meet - AppFixtures.day + 3)
        #expect(d.state.hangouts["h-91"]?.participants == ["u1", "u2"])
        // A newcomer in a snapshot is a joiner too.
        let snap = d.send(key: "h-91", value: AppFixtures.hangout(joined: ["u1", "u2", "u3"]), timestamp: meet - AppFixtures.day + 4)
        #expect(snap.records.map(\.dedupeKey) == ["hangout:h-91:joined:u3"])
        #expect(d.outputs.count == before + 2)
        // Without any snapshot, the first `join` is the organiser.
        var fresh = TestDriver(HangoutNotificationTransform())
        #expect(fresh.send(value: AppFixtures.join("h-1", "a"), timestamp: 1).records.isEmpty)
        #expect(fresh.send(value: AppFixtures.join("h-1", "b"), timestamp: 2).records.map(\.keyString) == ["topic:hangouts-user-a"])
        // ... until the hangout itself shows who is first: then joiners are told to them.
        fresh.send(value: AppFixtures.hangout(id: "h-1", joined: ["z", "a", "b"]), timestamp: 3)
        #expect(fresh.state.hangouts["h-1"]?.organiser == "z")
        #expect(fresh.send(value: AppFixtures.join("h-1", "c"), timestamp: 4).records.map(\.keyString) == ["topic:hangouts-user-z"])
    }

    @Test func changedTimeOrPlaceTellsParticipantsWhoWantIt() {
        var d = driverWithUsers()
        d.send(key: "u1", value: #"{"hangoutNoti":false,"newHangoutNoti":true}"#, headers: ["user-id": "u1"], timestamp: 0)
        d.send(key: "h-91", value: AppFixtures.hangout(), timestamp: meet - 2 * AppFixtures.day)
        let moved = d.send(key: "h-91", value: AppFixtures.hangout(meet: "2024-05-10 20:00"), timestamp: meet - AppFixtures.day)
        // u1 turned hangout pushes off; u2 has a token.
        #expect(moved.records.map(\.keyString) == ["token:tok-u2"])
        #expect(moved.records.first?.valueString?.contains(#""title":"Hangout changed","body":"Board games on Friday now meets at Dice Cafe, 2024-05-10 20:00.""#) == true)
        let sameAgain = d.send(key: "h-91", value: AppFixtures.hangout(meet: "2024-05-10 20:00"), timestamp: meet - AppFixtures.day + 1)
        #expect(sameAgain.records.isEmpty)
        let placeMoved = d.send(key: "h-91", value: AppFixtures.hangout(meet: "2024-05-10 20:00", placeName: "Dice Cafe 2"), timestamp: meet - AppFixtures.day + 2)
        #expect(placeMoved.records.count == 1)
        // An older snapshot arriving late changes nothing.
        #expect(d.send(key: "h-91", value: AppFixtures.hangout(), timestamp: meet - 2 * AppFixtures.day).records.isEmpty)
        let cancelled = d.send(key: "h-91", value: nil, timestamp: meet - AppFixtures.day + 3)
        #expect(cancelled.records.map(\.dedupeKey) == ["hangout:h-91:cancelled:u2"])
    }

    @Test func reminderAnHourBeforeOnceThenEvictedAfterRetention() throws {
        var d = driverWithUsers()
        d.send(key: "h-91", value: AppFixtures.hangout(), timestamp: meet - AppFixtures.day)
        #expect(d.advance(to: meet - hour - 1).records.isEmpty)
        let due = d.advance(to: meet - hour)
        #expect(due.records.map(\.dedupeKey) == ["hangout:h-91:reminder:\(meet):u1", "hangout:h-91:reminder:\(meet):u2"])
        #expect(d.advance(to: meet - 10).records.isEmpty)
        // Moved an hour later (a change push), then reminded again for the new time.
        let moved = d.send(key: "h-91", value: AppFixtures.hangout(meet: "2024-05-10 20:30"), timestamp: meet - 5)
        #expect(moved.records.allSatisfy { $0.dedupeKey.contains(":changed:") })
        #expect(d.advance(to: meet).records.map(\.dedupeKey) == [
            "hangout:h-91:reminder:\(meet + hour):u1", "hangout:h-91:reminder:\(meet + hour):u2",
        ])
        // Checkpointable.
        let restored = try JSONDecoder().decode(HangoutNotificationTransform.State.self, from: JSONEncoder().encode(d.state))
        #expect(restored == d.state)
        // Evicted a day after the meet time; a redelivered snapshot does not bring it back.
        d.advance(to: meet + hour + AppFixtures.day + 1)
        #expect(d.state.hangouts["h-91"] == nil)
        #expect(d.redeliver(from: 0).records.isEmpty)
        #expect(d.state.hangouts["h-91"] == nil)
        #expect(d.state.users["u2"]?.lastNotifiedAt != nil)
    }

    @Test func redeliveryProducesNothingNew() {
        var d = driverWithUsers()
        d.send(key: "h-91", value: AppFixtures.hangout(joined: ["u1"]), timestamp: meet - 2 * AppFixtures.day)
        d.send(key: "h-91", value: AppFixtures.join("h-91", "u2"), timestamp: meet - 2 * AppFixtures.day + 1)
        d.send(key: "h-91", value: AppFixtures.hangout(meet: "2024-05-10 20:00", joined: ["u1", "u2"]), timestamp: meet - AppFixtures.day)
        d.advance(to: meet - hour / 2)
        d.send(key: "h-91", value: nil, timestamp: meet - hour / 4)
        let keys = Set(d.outputs.map(\.dedupeKey))
        #expect(keys.count == d.outputs.count)
        #expect(d.outputs.count >= 5)
        #expect(d.redeliver(from: 0).records.isEmpty)
        var chained = TestDriver(HangoutDecodeTransform().then(HangoutNotificationTransform()), partitions: 1)
        for r in d.delivered { chained.deliver(r) }
        // The chain (decode, then notify) says the same, minus the reminders only `advance` sent.
        #expect(Set(chained.outputs.map(\.dedupeKey)) == keys.filter { !$0.contains(":reminder:") })
        #expect(chained.redeliver(from: 0).records.isEmpty)
    }

    /// Property: whatever the stream of snapshots, joins, leaves, cancellations and clock ticks,
    /// no reminder (hangout, meet time, user) is ever sent twice.
    @Test func aReminderIsNeverSentTwice() async {
        let gen = zip(Gen.int(in: 0...5), Gen.int(in: 0...3), Gen.int(in: 0...4), Gen.int(in: 0...240)).array(of: 1...60)
        await propertyCheck(count: 150, input: gen) { steps in
            var d = TestDriver(HangoutNotificationTransform(), partitions: 1)
            var t = meet - 4 * hour
            for (op, hangoutIndex, user, minutes) in steps {
                t += Int64(minutes) * 20_000
                let id = "h-\(hangoutIndex)"
                switch op {
                case 0, 1:
                    let meetTime = ["2024-05-10 19:30", "2024-05-10 20:00", "2024-05-10 18:00"][minutes % 3]
                    d.send(key: id, value: AppFixtures.hangout(id: id, meet: meetTime, joined: ["u0", "u\(user)"]), timestamp: t)
                case 2: d.send(key: id, value: AppFixtures.join(id, "u\(user)"), timestamp: t)
                case 3: d.send(key: id, value: AppFixtures.join(id, "u\(user)", "cancel"), timestamp: t)
                case 4: d.advance(to: t)
                default: d.redeliver(from: max(0, d.delivered.count - 3))
                }
            }
            d.advance(to: meet + hour)
            let reminders = d.outputs.map(\.dedupeKey).filter { $0.contains(":reminder:") }
            #expect(Set(reminders).count == reminders.count, "\(reminders)")
        }
    }

    @Test func hangoutImagesBecomeThumbnailRequests() throws {
        var d = TestDriver(HangoutThumbnailTransform(imageBase: "https://api.example/static-file/"), partitions: 1)
        d.send(key: "h-91", value: AppFixtures.hangout(), timestamp: 1)
        let request = try #require(d.outputs.first)
        #expect(d.outputs.count == 1)
        #expect(request.output == "thumbnails.requests" && request.keyString == "hangout-h-91")
        let decoded = try ThumbnailRequest.decode(request.value ?? [])
        #expect(decoded.owner == .hangout && decoded.ownerId == "h-91" && decoded.imageIndex == 0)
        #expect(decoded.sourceURL.hasPrefix("https://api.example/static-file/") && decoded.sourceURL.hasSuffix(".jpg"))
        // A second read of the same hangout asks for the same thumbnails; a user event for none.
        let again = d.send(key: "h-91", value: AppFixtures.hangout(), timestamp: 2)
        #expect(again.records.map(\.dedupeKey) == [request.dedupeKey])
        #expect(d.send(key: "u1", value: #"{"method":"PUT","path":"hangout/h-91","userId":"u1","form":{"action":"join"}}"#, timestamp: 3).records.isEmpty)
    }
}
