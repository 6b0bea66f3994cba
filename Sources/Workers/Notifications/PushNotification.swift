/// A push notification, independent of the push service. Stages produce these; the render
/// transform (``NotificationRenderTransform``) turns each into an FCM and an APNs payload.
public struct PushNotification: Sendable, Hashable, Codable {
    /// Who receives it.
    public enum Recipient: Sendable, Hashable, Codable {
        /// One device or user token.
        case token(String)
        /// An FCM topic (`campaign-101`, `market-KRW-BTC`), every subscriber.
        case topic(String)
    }

    public var recipient: Recipient
    public var title: String
    public var body: String
    /// Extra key/value pairs for the app (deep links, ids), kept sorted by key so the rendered
    /// JSON is byte-for-byte deterministic.
    public var data: [String: String]
    /// Notifications with the same collapse key replace each other on the device.
    public var collapseKey: String
    /// Deterministic identity: the same event always yields the same key, so a redelivered
    /// record produces a notification the sender can drop.
    public var dedupeKey: String
    /// An image shown with the notification (FCM `notification.image`; for APNs, `image` next to
    /// `aps` with `mutable-content`, for the app's notification service extension).
    public var imageURL: String?

    public init(
        recipient: Recipient, title: String, body: String, data: [String: String] = [:], collapseKey: String,
        dedupeKey: String, imageURL: String? = nil
    ) {
        self.imageURL = imageURL
        self.recipient = recipient
        self.title = title
        self.body = body
        self.data = data
        self.collapseKey = collapseKey
        self.dedupeKey = dedupeKey
    }

    /// FCM HTTP v1 `messages:send` body.
    public func fcmJSON() -> [UInt8] {
        var w = JSONWriter()
        w.beginObject()
        w.key("message")
        w.beginObject()
        switch recipient {
        case .token(let t): w.key("token"); w.string(t)
        case .topic(let t): w.key("topic"); w.string(t)
        }
        w.key("notification")
        w.beginObject()
        w.key("title"); w.string(title)
        w.key("body"); w.string(body)
        if let imageURL { w.key("image"); w.string(imageURL) }
        w.endObject()
        writeData(&w, extra: true)
        w.key("android"); w.beginObject(); w.key("collapse_key"); w.string(collapseKey); w.endObject()
        w.key("apns")
        w.beginObject()
        w.key("headers"); w.beginObject(); w.key("apns-collapse-id"); w.string(collapseKey); w.endObject()
        w.endObject()
        w.endObject()
        w.endObject()
        return w.bytes
    }

    /// APNs payload (`aps` plus the data keys at top level). The collapse id is not part of the
    /// payload in APNs: it travels as the `apns-collapse-id` HTTP header, which
    /// ``NotificationRenderTransform`` puts on the output record's headers.
    public func apnsJSON() -> [UInt8] {
        var w = JSONWriter()
        w.beginObject()
        w.key("aps")
        w.beginObject()
        w.key("alert")
        w.beginObject()
        w.key("title"); w.string(title)
        w.key("body"); w.string(body)
        w.endObject()
        w.key("thread-id"); w.string(collapseKey)
        if imageURL != nil { w.key("mutable-content"); w.int(1) }
        w.endObject()
        if let imageURL { w.key("image"); w.string(imageURL) }
        for key in data.keys.sorted() where key != "aps" {
            w.key(text: key); w.string(data[key] ?? "")
        }
        w.key("dedupe_key"); w.string(dedupeKey)
        w.endObject()
        return w.bytes
    }

    private func writeData(_ w: inout JSONWriter, extra: Bool) {
        w.key("data")
        w.beginObject()
        for key in data.keys.sorted() {
            w.key(text: key); w.string(data[key] ?? "")
        }
        if extra { w.key("dedupe_key"); w.string(dedupeKey) }
        w.endObject()
    }

    /// The typed form as JSON (what producing transforms emit on the `notifications` output):
    /// `{"token"|"topic":..,"title":..,"body":..,"data":{..},"collapse_key":..,"dedupe_key":..}`.
    public func jsonBytes() -> [UInt8] {
        var w = JSONWriter()
        w.beginObject()
        switch recipient {
        case .token(let t): w.key("token"); w.string(t)
        case .topic(let t): w.key("topic"); w.string(t)
        }
        w.key("title"); w.string(title)
        w.key("body"); w.string(body)
        writeData(&w, extra: false)
        w.key("collapse_key"); w.string(collapseKey)
        w.key("dedupe_key"); w.string(dedupeKey)
        if let imageURL { w.key("image"); w.string(imageURL) }
        w.endObject()
        return w.bytes
    }

    /// The record a producing transform emits for this notification.
    public func outputRecord(output: String = "notifications") -> OutputRecord {
        let key: String
        switch recipient {
        case .token(let t): key = "token:" + t
        case .topic(let t): key = "topic:" + t
        }
        return OutputRecord(output: output, key: Array(key.utf8), value: jsonBytes(), dedupeKey: dedupeKey)
    }
}

/// Reads the typed notification JSON written by ``PushNotification/jsonBytes()``.
public struct NotificationDecoder: Sendable {
    public var limits: DecodeLimits
    public init(limits: DecodeLimits = .default) { self.limits = limits }

    private enum Field: Int { case token, topic, title, body, data, collapseKey, dedupeKey, image }
    private static let keys = KeyTable([
        ("token", Field.token.rawValue), ("topic", Field.topic.rawValue), ("title", Field.title.rawValue),
        ("body", Field.body.rawValue), ("data", Field.data.rawValue), ("collapse_key", Field.collapseKey.rawValue),
        ("dedupe_key", Field.dedupeKey.rawValue), ("image", Field.image.rawValue),
    ])

    public func decode(_ bytes: [UInt8]) throws(DecodeFailure) -> PushNotification { try decode(bytes[...]) }

    public func decode(_ bytes: ArraySlice<UInt8>) throws(DecodeFailure) -> PushNotification {
        try JSONScanner.withScanner(bytes, limits: limits) { s throws(DecodeFailure) in
            try s.beginObject()
            var token: String?, topic: String?, title: String?, body: String?, collapse: String?, dedupe: String?, image: String?
            var data: [String: String] = [:]
            var first = true
            var expected = Self.keys.firstExpected
            while let key = try s.nextKey(&first, in: Self.keys, expected: &expected) {
                do throws(DecodeFailure) {
                    switch Field(rawValue: key.field) {
                    case .token: token = try s.readOptionalString()
                    case .topic: topic = try s.readOptionalString()
                    case .title: title = try s.readOptionalString()
                    case .body: body = try s.readOptionalString()
                    case .collapseKey: collapse = try s.readOptionalString()
                    case .dedupeKey: dedupe = try s.readOptionalString()
                    case .image: image = try s.readOptionalString()
                    case .data:
                        if try s.consumeNull() { break }
                        try s.beginObject()
                        var firstData = true
                        while let k = try s.nextKey(&firstData) {
                            guard data.count < 64 else { throw invalid("", "more than 64 data entries") }
                            do throws(DecodeFailure) { data[try s.string(k)] = try s.readString() } catch {
                                throw error.under(s.keyName(k))
                            }
                        }
                    case nil: try s.skipValue()
                    }
                } catch {
                    throw error.under(s.keyName(key))
                }
            }
            let recipient: PushNotification.Recipient
            if let token { recipient = .token(token) } else if let topic { recipient = .topic(topic) } else {
                throw missing("token")
            }
            guard let title else { throw missing("title") }
            guard let body else { throw missing("body") }
            guard let dedupe else { throw missing("dedupe_key") }
            return PushNotification(
                recipient: recipient, title: title, body: body, data: data, collapseKey: collapse ?? dedupe, dedupeKey: dedupe,
                imageURL: image)
        }
    }
}

/// `notifications.render`: typed notification in, one provider's record out: for an APNs device
/// token (64 hex digits) an APNs record (`notifications.apns`, with the `apns-collapse-id`
/// header); for an FCM registration token or a topic an FCM record (`notifications.fcm`; FCM
/// reaches a topic's iPhones through its APNs bridge, and APNs has no topics). Stateless.
public struct NotificationRenderTransform: Transform {
    public var decoder: NotificationDecoder
    public init(decoder: NotificationDecoder = NotificationDecoder()) { self.decoder = decoder }

    public var name: String { "notifications.render" }

    public func process(_ record: InputRecord, state: inout NoState, context: TransformContext, into out: inout TransformOutput) {
        guard let value = record.value else { return }  // tombstone: nothing to send
        let n: PushNotification
        do { n = try decoder.decode(value) } catch { return out.fail(error) }
        if case .token(let token) = n.recipient, Self.isAPNsDeviceToken(token) {
            out.append(
                OutputRecord(
                    output: "notifications.apns", key: record.key, value: n.apnsJSON(),
                    headers: [RecordHeader("apns-collapse-id", n.collapseKey)], dedupeKey: "apns:" + n.dedupeKey))
        } else {
            out.append(OutputRecord(output: "notifications.fcm", key: record.key, value: n.fcmJSON(), dedupeKey: "fcm:" + n.dedupeKey))
        }
    }

    /// An APNs device token is 32 bytes, written as 64 hexadecimal digits; an FCM registration
    /// token is longer and has `:`, `-` and `_` in it. A token is one provider's, never both.
    public static func isAPNsDeviceToken(_ token: String) -> Bool {
        token.utf8.count == 64 && isHexadecimal(token)
    }

    /// Only the digits 0-9 and a-f in either case.
    public static func isHexadecimal(_ text: String) -> Bool {
        text.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) || ($0 >= 0x41 && $0 <= 0x46) }
    }
}
