import Foundation
import Testing
import Workers
import WorkersTesting

@Suite struct ProductTransformTests {
    @Test func decodeStageEmitsOneEventPerProductWithKind() {
        var driver = TestDriver(ProductDecodeTransform(), topic: "market.products")
        driver.send(key: "page", value: Fixtures.productPageOld, timestamp: 1)
        driver.send(key: "522", value: Fixtures.productDetail, headers: ["event-type": "updated"], timestamp: 2)
        driver.send(key: "16", value: nil, timestamp: 3)
        let events = driver.outputs(named: "products.events")
        #expect(events.map(\.keyString) == ["15", "16", "522", "16"])
        // #16 was issued a day after it was created: an update.
        #expect(events.map { $0.headers.string(named: "event-type") } == ["created", "updated", "updated", "deleted"])
        #expect(events.last?.value == nil)
        #expect(driver.deadLetters.isEmpty)
        // Created-vs-updated without a header: issued_at after created_at is an update.
        var d2 = TestDriver(ProductDecodeTransform())
        d2.send(value: Fixtures.productDetail, timestamp: 1)
        #expect(d2.outputs.first?.headers.string(named: "event-type") == "updated")
    }

    @Test func decodeStageValueGolden() {
        var driver = TestDriver(ProductDecodeTransform(), topic: "market.products", partitions: 1)
        driver.send(value: Fixtures.productDetail, timestamp: 1)
        #expect(driver.outputs.first?.valueString == """
            {"id":522,"vendor_id":6,"vendorName":"keyboard-shop","name":"Keyboard","description":"mechanical",\
            "thumbnail":"https://img.example.com/t/522","currency":"KRW","price":50000,"bargain_price":45000,\
            "discounted_price":5000,"stock":3,"created_at":"2022-01-03T15:00:00.000Z","issued_at":"2022-01-04T15:00:00.000Z",\
            "images":[{"id":1,"url":"https://img.example.com/o/1.jpg","thumbnail_url":"https://img.example.com/t/1.jpg",\
            "issued_at":"2022-01-03T15:00:00.000Z"},{"id":2,"url":"https://img.example.com/o/2",\
            "thumbnail_url":"https://img.example.com/t/2","issued_at":"2022-01-03T15:00:00.000Z"}]}
            """)
        #expect(driver.outputs.first?.dedupeKey == "product:522:updated:market.products/0/0#0")
    }

    @Test func decodeStageFailures() {
        var driver = TestDriver(ProductDecodeTransform())
        driver.send(key: "x", value: nil, timestamp: 1)
        driver.send(value: Fixtures.productDetail, headers: ["event-type": "renamed"], timestamp: 2)
        driver.send(value: Fixtures.productDetail.replacingOccurrences(of: #""price":50000"#, with: #""price":-5"#), timestamp: 3)
        #expect(driver.deadLetters.map(\.failure.field) == ["key", "header:event-type", "price"])
        #expect(driver.outputs.isEmpty)
    }

    @Test func thumbnailRequestsOnePerImageGolden() {
        var driver = TestDriver(ProductDecodeTransform().then(ThumbnailRequestTransform()))
        driver.send(value: Fixtures.productDetail, timestamp: 1)
        let requests = driver.outputs(named: "thumbnails.requests")
        #expect(requests.count == 2)  // 2 images; the worker renders every size of each
        let key = requests.first?.dedupeKey ?? ""
        #expect(requests.first?.valueString == """
            {"owner":"product","owner_id":"522","image_index":0,"source_url":"https://img.example.com/o/1.jpg",\
            "dedupe_key":"\(key)"}
            """)
        #expect(requests.map(\.keyString) == ["522", "522"])
        #expect(requests.map(\.dedupeKey).allSatisfy { $0.hasPrefix("thumb:product:522:") })
        #expect(Set(requests.map(\.dedupeKey)).count == 2)
        // The worker reads back what the stage wrote.
        let decoded = try? ThumbnailRequest.decode(requests[0].value ?? [])
        #expect(decoded == ThumbnailRequest(owner: .product, ownerId: "522", imageIndex: 0, sourceURL: "https://img.example.com/o/1.jpg"))
        #expect(decoded?.dedupeKey == key)
        // An update with the same images yields the same dedupe keys; a deletion yields nothing.
        let before = requests.map(\.dedupeKey)
        let again = driver.send(value: Fixtures.productDetail, headers: ["event-type": "updated"], timestamp: 2)
        #expect(again.records.map(\.dedupeKey) == before)
        #expect(driver.send(key: "522", value: nil, timestamp: 3).records.isEmpty)
    }

    @Test func listProductsWithoutImagesUseTheirThumbnail() {
        var driver = TestDriver(ThumbnailRequestTransform())
        driver.send(value: Fixtures.productPageNew, timestamp: 1)
        #expect(driver.outputs.count == 1)
        #expect(driver.outputs.first?.valueString?.contains(#""source_url":"https://s3.example.com/training-resources/2022/10/18/abc""#) == true)
    }

    @Test func thumbnailRequestsThatCannotBeUsedNameTheField() {
        func failure(_ json: String) -> DecodeFailure? {
            do { _ = try ThumbnailRequest.decode(Array(json.utf8)); return nil } catch { return error }
        }
        #expect(failure(#"{"owner":"planet","owner_id":"1","image_index":0,"source_url":"u"}"#)?.field == "owner")
        #expect(failure(#"{"owner":"product","image_index":0,"source_url":"u"}"#)?.field == "owner_id")
        #expect(failure(#"{"owner":"product","owner_id":"1","image_index":-1,"source_url":"u"}"#)?.field == "image_index")
        #expect(failure(#"{"owner":"product","owner_id":"1","image_index":0}"#)?.field == "source_url")
        #expect(failure(#"{"owner":"product","owner_id":"1","image_index":0,"source_url":"u"}"#) == nil)
    }

    @Test func newProductNotificationsCarryTheListThumbnailReadyBeforeTheWindowCloses() throws {
        var driver = TestDriver(NewProductsNotificationTransform(intervalMillis: 60_000), topic: "products.raw", partitions: 1)
        func product(_ id: Int) -> String { Fixtures.productPageNew.replacingOccurrences(of: #""id":2012"#, with: #""id":\#(id)"#) }
        func ready(_ id: Int, index: Int = 0, at t: Int64, offset: Int64) {
            let value = """
                {"owner":"product","owner_id":"\(id)","image_index":\(index),"source_url":"http://x/\(id).jpg","source_hash":"h",\
                "thumbnails":[{"name":"list","key":"k","location":"ab/cd/l.jpg","uri":"file:///thumbs/\(id)-\(index)-list.jpg",\
                "width":200,"height":200,"bytes":9,"format":"jpeg","content_hash":"c"},\
                {"name":"grid","key":"k2","location":"ab/cd/g.jpg","uri":"file:///thumbs/\(id)-grid.jpg"}],"request":"r"}
                """
            driver.deliver(InputRecord(
                key: Array("\(id)".utf8), value: Array(value.utf8), timestamp: t,
                origin: RecordOrigin(topic: "thumbnails.ready", partition: 0, offset: offset)))
        }
        driver.send(key: "1", value: product(1), headers: ["category": "watches"], timestamp: 1_000)
        ready(1, index: 1, at: 5_000, offset: 0)  // not the first image: not the list thumbnail
        ready(1, at: 20_000, offset: 1)
        driver.send(key: "2", value: product(2), headers: ["category": "books"], timestamp: 30_000)
        #expect(driver.outputs.isEmpty, "ready events produce nothing by themselves")
        _ = driver.advance(to: 61_000)
        let watches = try #require(driver.outputs.first { $0.dedupeKey == "new-products:watches:1000" })
        #expect(watches.valueString?.contains(#""image":"file:///thumbs/1-0-list.jpg""#) == true, "\(watches.valueString ?? "")")
        // The books window closes at 90 s; product 2's thumbnail comes after that: none.
        _ = driver.advance(to: 90_000)
        ready(2, at: 95_000, offset: 2)
        let books = try #require(driver.outputs.first { $0.dedupeKey == "new-products:books:30000" })
        #expect(books.valueString?.contains(#""image""#) == false)

        // Rendered: FCM notification.image (the topic); APNs mutable-content with the image next
        // to aps (an iPhone's device token).
        var render = TestDriver(NotificationRenderTransform())
        let device = String(repeating: "ab", count: 32)
        render.send(value: watches.valueString, timestamp: 61_000)
        render.send(value: watches.valueString?.replacingOccurrences(of: #""topic":"new-products-watches""#, with: #""token":"\#(device)""#), timestamp: 61_000)
        let fcm = try #require(render.outputs(named: "notifications.fcm").first?.valueString)
        #expect(fcm.contains(#""notification":{"title":"New products","body":"Apple Watch","image":"file:///thumbs/1-0-list.jpg"}"#), "\(fcm)")
        let apns = try #require(render.outputs(named: "notifications.apns").first?.valueString)
        #expect(apns.contains(#""mutable-content":1}"#) && apns.contains(#""image":"file:///thumbs/1-0-list.jpg""#), "\(apns)")
    }

    @Test func aBurstOfNewProductsGivesOneNotificationPerCategory() {
        let stage = NewProductsNotificationTransform(intervalMillis: 60_000)
        var driver = TestDriver(stage)
        func product(_ id: Int, _ name: String) -> String {
            Fixtures.productPageNew
                .replacingOccurrences(of: #""id":2012"#, with: #""id":\#(id)"#)
                .replacingOccurrences(of: "Apple Watch", with: name)
        }
        driver.send(value: product(1, "Watch"), headers: ["category": "watches"], timestamp: 1_000)
        driver.send(value: product(2, "Strap"), headers: ["category": "watches"], timestamp: 20_000)
        driver.send(value: product(3, "Book"), headers: ["category": "books"], timestamp: 30_000)
        driver.send(value: product(2, "Strap"), headers: ["category": "watches"], timestamp: 40_000)  // redelivered
        #expect(driver.outputs.isEmpty)
        driver.send(value: product(4, "Band"), headers: ["category": "watches"], timestamp: 61_000)  // closes "watches", opens a new window
        #expect(driver.outputs.map(\.dedupeKey) == ["new-products:watches:1000"])
        #expect(driver.outputs.first?.valueString == """
            {"topic":"new-products-watches","title":"New products","body":"Watch and 1 more",\
            "data":{"category":"watches","count":"2","kind":"new-products"},"collapse_key":"new-products-watches",\
            "dedupe_key":"new-products:watches:1000"}
            """)
        driver.advance(to: 200_000)
        #expect(driver.outputs.map(\.dedupeKey) == [
            "new-products:watches:1000", "new-products:books:30000", "new-products:watches:61000",
        ])
        // Everything again: nothing new to announce.
        driver.redeliver(from: 0)
        driver.advance(to: 400_000)
        #expect(driver.outputs.count == 3)
    }
}

@Suite struct NotificationTests {
    let n = PushNotification(
        recipient: .topic("campaign-7"), title: "Goal reached!", body: "Walk \"더\" — 100%",
        data: ["kind": "goal-reached", "campaign_id": "7"], collapseKey: "campaign-7-goal", dedupeKey: "campaign:7:goal")

    @Test func rendersFCMGolden() {
        #expect(String(decoding: n.fcmJSON(), as: UTF8.self) == """
            {"message":{"topic":"campaign-7","notification":{"title":"Goal reached!","body":"Walk \\"더\\" — 100%"},\
            "data":{"campaign_id":"7","kind":"goal-reached","dedupe_key":"campaign:7:goal"},\
            "android":{"collapse_key":"campaign-7-goal"},"apns":{"headers":{"apns-collapse-id":"campaign-7-goal"}}}}
            """)
    }

    @Test func rendersAPNsGolden() {
        #expect(String(decoding: n.apnsJSON(), as: UTF8.self) == """
            {"aps":{"alert":{"title":"Goal reached!","body":"Walk \\"더\\" — 100%"},"thread-id":"campaign-7-goal"},\
            "campaign_id":"7","kind":"goal-reached","dedupe_key":"campaign:7:goal"}
            """)
    }

    /// One provider per notification: a topic and an FCM registration token go to FCM, an APNs
    /// device token (64 hex digits) to APNs, never both (a device would get it twice).
    @Test func typedFormRoundTripsAndRenderStageRoutesByToken() throws {
        #expect(try NotificationDecoder().decode(n.jsonBytes()) == n)
        var driver = TestDriver(NotificationRenderTransform())
        let topic = driver.send(key: "topic:campaign-7", value: String(decoding: n.jsonBytes(), as: UTF8.self), timestamp: 1)
        #expect(topic.records.map(\.output) == ["notifications.fcm"] && topic.records.map(\.dedupeKey) == ["fcm:campaign:7:goal"])
        var android = n
        android.recipient = .token("fR3n7:APA91bj6BqAf3hT12Eisz7Dqb09QsSFeAIgcVg9-IrOpAa")
        let fcm = driver.send(key: "token:x", value: String(decoding: android.jsonBytes(), as: UTF8.self), timestamp: 1)
        #expect(fcm.records.map(\.output) == ["notifications.fcm"])
        var iphone = n
        iphone.recipient = .token(String(repeating: "0f", count: 32))
        let out = driver.send(key: "token:y", value: String(decoding: iphone.jsonBytes(), as: UTF8.self), timestamp: 1)
        #expect(out.records.map(\.output) == ["notifications.apns"])
        #expect(out.records.last?.headers == [RecordHeader("apns-collapse-id", "campaign-7-goal")])
        #expect(out.records.map(\.dedupeKey) == ["apns:campaign:7:goal"])
        #expect(!NotificationRenderTransform.isAPNsDeviceToken(String(repeating: "0f", count: 31) + "0g"))
        driver.send(value: #"{"title":"x"}"#, timestamp: 2)
        #expect(driver.deadLetters.map(\.failure.field) == ["token"])
    }
}
