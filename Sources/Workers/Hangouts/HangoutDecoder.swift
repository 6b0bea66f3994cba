/// Decodes the Bappy hangout stream (formats.md §4) into ``HangoutEvent``s, in one pass over
/// the bytes whatever the message is:
///
/// - a hangout object, bare or inside the `{"status","message","data"}` envelope, alone or as a
///   list page (`data.HangoutList[]`, `pageInfo` ignored) → ``HangoutEvent/hangout(_:)``;
/// - a captured request without a JSON body, `{"method","path","form"?,"userId"?}`:
///   `PUT hangout/{id}` with `action` = `join` | `cancel` (cancel means leave) → membership,
///   `DELETE hangout/{id}` → cancellation, `PUT user/fcmToken` → token, `PUT notification` →
///   settings; a tombstone keyed by the hangout id is a cancellation too;
/// - a user's saved places (`[{locationID,…}]`), notification settings (`{hangoutNoti,
///   newHangoutNoti}`) or `{fcmToken}`, bare or enveloped, for the user named by the
///   ``userHeader`` header (the responses themselves do not name the user).
///
/// Quirks accepted: coordinates and counts as strings (multipart writes), place fields flattened
/// at the top level (writes) or in `place{…}` (reads), categories as a list or one string,
/// `Projects` for the API's `Projcets`. The meet time `yyyy-MM-dd HH:mm` has no zone and is read
/// at ``utcOffsetSeconds`` (Korean time by default); ISO date-times with a zone are accepted
/// too (the decode transform's own output).
///
/// Validation: id, title, plan, meet time, language, limit (≥ 1) and place (name and
/// coordinates in range) are required; counts are not negative and the current count is not
/// above the limit; categories are from the known set; each user-id array and its image array
/// have the same length. A write acknowledgement (`data: true`) carries no event and fails.
public struct HangoutDecoder: Sendable {
    public var limits: DecodeLimits
    public var utcOffsetSeconds: Int
    /// Header naming the user of user-scoped messages.
    public var userHeader: String

    public init(limits: DecodeLimits = .default, utcOffsetSeconds: Int = 9 * 3600, userHeader: String = "user-id") {
        self.limits = limits
        self.utcOffsetSeconds = utcOffsetSeconds
        self.userHeader = userHeader
    }

    /// The events of one Kafka record (a tombstone cancels the hangout named by the key).
    public func decode(_ record: InputRecord) throws(DecodeFailure) -> [HangoutEvent] {
        guard let value = record.value else {
            guard let key = record.key, let id = String(validating: key, as: UTF8.self), !id.isEmpty else {
                throw DecodeFailure(field: "key", reason: .invalidValue, detail: "a cancellation (tombstone) needs the hangout id as key")
            }
            return [.cancelled(hangoutId: id)]
        }
        let user = record.headers.string(named: userHeader).flatMap { $0.isEmpty ? nil : $0 }
        return try decode(value, user: user)
    }

    /// The events of one message; `user` is the user of user-scoped messages.
    public func decode(_ bytes: [UInt8], user: String? = nil) throws(DecodeFailure) -> [HangoutEvent] { try decode(bytes[...], user: user) }

    /// ``decode(_:user:)-([UInt8],_)`` over a slice (a consumed record's value).
    public func decode(_ bytes: ArraySlice<UInt8>, user: String? = nil) throws(DecodeFailure) -> [HangoutEvent] {
        let body = try JSONScanner.withScanner(bytes, limits: limits) { s throws(DecodeFailure) in
            try readBody(&s, path: "", nested: false)
        }
        return try events(body, user: user)
    }

    // MARK: Scanning

    private indirect enum Body {
        case object(Raw)
        case array([Raw], path: String)
        case bool(Bool, path: String)
        case null(path: String)
    }

    /// Every field any message kind can have, collected in one pass.
    private struct Raw {
        var path: String
        var envelope = false
        var data: Body?
        var list: [Raw]?
        var id: String?, title: String?, plan: String?, meetTime: Int64?, language: String?
        var categories: [HangoutCategory]?, openChat: String?, total: Int64?, current: Int64?, likes: Int64?
        var image: String?, status: HangoutStatus?
        var placeName: String?, placeAddress: String?, placeLat: Double?, placeLng: Double?
        var joinIds: [String]?, joinImages: [String?]?, likeIds: [String]?, likeImages: [String?]?
        var hangoutNoti: Bool?, newHangoutNoti: Bool?, fcmToken: String?
        var method: String?, requestPath: String?, action: String?, userId: String?
        var locationID: String?, locationName: String?, locationAddress: String?
        var latitude: Double?, longitude: Double?, isSelected: Bool?

        init(path: String) { self.path = path }

        func field(_ name: String) -> String { path.isEmpty ? name : path + "." + name }
        var looksLikePlace: Bool { locationID != nil || latitude != nil || longitude != nil }
    }

    private enum Field: Int {
        case status, message, data, token, list, pageInfo
        case id, title, plan, meetTime, language, category, openChat, total, current, likes, image, hangoutStatus
        case place, placeName, placeAddress, placeLat, placeLng, joinIds, joinImages, likeIds, likeImages
        case hangoutNoti, newHangoutNoti, fcmToken, method, path, form, action, userId
        case locationID, locationName, locationAddress, latitude, longitude, isSelected
    }

    private static let keys = KeyTable([
        ("status", Field.status.rawValue), ("message", Field.message.rawValue), ("data", Field.data.rawValue),
        ("token", Field.token.rawValue), ("HangoutList", Field.list.rawValue), ("pageInfo", Field.pageInfo.rawValue),
        ("hangoutInfoId", Field.id.rawValue), ("hangoutTitle", Field.title.rawValue), ("hangoutPlan", Field.plan.rawValue),
        ("hangoutMeetTime", Field.meetTime.rawValue), ("hangoutLanguage", Field.language.rawValue),
        ("hangoutCategory", Field.category.rawValue), ("hangoutOpenChat", Field.openChat.rawValue),
        ("hangoutTotalNum", Field.total.rawValue), ("hangoutCurrentNum", Field.current.rawValue),
        ("hangoutLikeCount", Field.likes.rawValue), ("hangoutImageUrl", Field.image.rawValue),
        ("hangoutStatus", Field.hangoutStatus.rawValue), ("place", Field.place.rawValue),
        ("placeName", Field.placeName.rawValue), ("placeAddress", Field.placeAddress.rawValue),
        ("placeLatitude", Field.placeLat.rawValue), ("placeLongitude", Field.placeLng.rawValue),
        ("hangoutJoinUserId", Field.joinIds.rawValue), ("hangoutJoinUserImageUrl", Field.joinImages.rawValue),
        ("hangoutLikeUserId", Field.likeIds.rawValue), ("hangoutLikeUserImageUrl", Field.likeImages.rawValue),
        ("hangoutNoti", Field.hangoutNoti.rawValue), ("newHangoutNoti", Field.newHangoutNoti.rawValue),
        ("fcmToken", Field.fcmToken.rawValue), ("method", Field.method.rawValue), ("path", Field.path.rawValue),
        ("form", Field.form.rawValue), ("action", Field.action.rawValue), ("userId", Field.userId.rawValue),
        ("locationID", Field.locationID.rawValue), ("locationName", Field.locationName.rawValue),
        ("locationAddress", Field.locationAddress.rawValue), ("latitude", Field.latitude.rawValue),
        ("longitude", Field.longitude.rawValue), ("isSelected", Field.isSelected.rawValue),
    ])

    /// A message body: an object, an array of objects, a boolean (write acknowledgement) or null.
    /// `nested` is true inside an envelope's `data` (no second envelope).
    private func readBody(_ s: inout JSONScanner, path: String, nested: Bool) throws(DecodeFailure) -> Body {
        switch try s.peek() {
        case UInt8(ascii: "{"): return .object(try readObject(&s, path: path, envelope: !nested))
        case UInt8(ascii: "["): return .array(try readObjects(&s, path: path), path: path)
        case UInt8(ascii: "t"), UInt8(ascii: "f"): return .bool(try s.readBool(), path: path)
        case UInt8(ascii: "n"): _ = try s.consumeNull(); return .null(path: path)
        default: throw s.wrongType("object or array")
        }
    }

    private func readObjects(_ s: inout JSONScanner, path: String) throws(DecodeFailure) -> [Raw] {
        try s.beginArray()
        var out: [Raw] = []
        var first = true
        while try s.nextElement(&first) {
            guard out.count < s.limits.maxArrayElements else { throw s.tooManyElements() }
            do throws(DecodeFailure) {
                out.append(try readObject(&s, path: "\(path)[\(out.count)]", envelope: false))
            } catch {
                throw error.under("[\(out.count)]")
            }
        }
        return out
    }

    private func readObject(_ s: inout JSONScanner, path: String, envelope: Bool) throws(DecodeFailure) -> Raw {
        var raw = Raw(path: path)
        try readFields(&s, into: &raw, envelope: envelope)
        return raw
    }

    /// Reads an object's fields into `raw` (also used to merge a request's `form` and a read's
    /// nested `place` into the same record).
    private func readFields(_ s: inout JSONScanner, into raw: inout Raw, envelope: Bool) throws(DecodeFailure) {
        try s.beginObject()
        var first = true
        var expected = Self.keys.firstExpected
        while let key = try s.nextKey(&first, in: Self.keys, expected: &expected) {
            do throws(DecodeFailure) {
                guard let field = Field(rawValue: key.field) else {
                    try s.skipValue()
                    continue
                }
                switch field {
                case .status, .message, .token:
                    // Envelope members; a hangout's own status is `hangoutStatus`.
                    raw.envelope = true
                    try s.skipValue()
                case .data:
                    guard envelope else { try s.skipValue(); break }
                    raw.envelope = true
                    raw.data = try readBody(&s, path: raw.field("data"), nested: true)
                case .list:
                    if try s.consumeNull() { raw.list = []; break }
                    raw.list = try readObjects(&s, path: raw.field("HangoutList"))
                case .pageInfo: try s.skipValue()
                case .id: raw.id = try readID(&s)
                case .title: raw.title = try s.readOptionalString()
                case .plan: raw.plan = try s.readOptionalString()
                case .meetTime: raw.meetTime = try readMeetTime(&s)
                case .language: raw.language = try s.readOptionalString()
                case .category: raw.categories = try readCategories(&s)
                case .openChat: raw.openChat = try s.readOptionalString()
                case .total: raw.total = try readCount(&s)
                case .current: raw.current = try readCount(&s)
                case .likes: raw.likes = try readCount(&s)
                case .image: raw.image = try s.readOptionalString()
                case .hangoutStatus:
                    guard let text = try s.readOptionalString() else { break }
                    raw.status = text == "open" ? .open : text == "closed" ? .closed : .expired
                case .place:
                    if try s.consumeNull() { break }
                    try readFields(&s, into: &raw, envelope: false)
                case .placeName: raw.placeName = try s.readOptionalString()
                case .placeAddress: raw.placeAddress = try s.readOptionalString()
                case .placeLat: raw.placeLat = try readCoordinate(&s, limit: 90)
                case .placeLng: raw.placeLng = try readCoordinate(&s, limit: 180)
                case .joinIds: raw.joinIds = try readStrings(&s)
                case .joinImages: raw.joinImages = try readOptionalStrings(&s)
                case .likeIds: raw.likeIds = try readStrings(&s)
                case .likeImages: raw.likeImages = try readOptionalStrings(&s)
                case .hangoutNoti: raw.hangoutNoti = try readFlexBool(&s)
                case .newHangoutNoti: raw.newHangoutNoti = try readFlexBool(&s)
                case .fcmToken: raw.fcmToken = try s.readOptionalString()
                case .method: raw.method = try s.readOptionalString()
                case .path: raw.requestPath = try s.readOptionalString()
                case .form:
                    if try s.consumeNull() { break }
                    try readFields(&s, into: &raw, envelope: false)
                case .action: raw.action = try readFormString(&s)
                case .userId: raw.userId = try readID(&s)
                case .locationID: raw.locationID = try readID(&s)
                case .locationName: raw.locationName = try s.readOptionalString()
                case .locationAddress: raw.locationAddress = try s.readOptionalString()
                case .latitude: raw.latitude = try readCoordinate(&s, limit: 90)
                case .longitude: raw.longitude = try readCoordinate(&s, limit: 180)
                case .isSelected: raw.isSelected = try readFlexBool(&s)
                }
            } catch {
                throw error.under(s.keyName(key))
            }
        }
    }

    // MARK: Values

    /// A string id; an integral number is accepted and written in decimal.
    private func readID(_ s: inout JSONScanner) throws(DecodeFailure) -> String? {
        switch try s.peek() {
        case UInt8(ascii: "n"): _ = try s.consumeNull(); return nil
        case UInt8(ascii: "\""): return try s.readString()
        default: return String(try s.readInt())
        }
    }

    /// A form value: a string, or a one-element list of strings (repeated multipart field).
    private func readFormString(_ s: inout JSONScanner) throws(DecodeFailure) -> String? {
        guard try s.peek() == UInt8(ascii: "[") else { return try s.readOptionalString() }
        let list = try readStrings(&s)
        guard list.count <= 1 else { throw invalid("", "expected one value, got \(list.count)") }
        return list.first
    }

    private func readFlexBool(_ s: inout JSONScanner) throws(DecodeFailure) -> Bool? {
        guard try s.peek() == UInt8(ascii: "\"") else { return try s.readOptionalBool() }
        switch try s.readString() {
        case "true": return true
        case "false": return false
        case let other: throw invalid("", "expected true or false, got \(other.prefix(20))")
        }
    }

    /// A number, or a string holding one (multipart writes send numbers as text).
    private func readFlexDouble(_ s: inout JSONScanner) throws(DecodeFailure) -> Double? {
        guard try s.peek() == UInt8(ascii: "\"") else { return try s.readOptionalDouble() }
        let text = try s.readString()
        guard let v = Double(text), v.isFinite else { throw invalid("", "expected a number, got \(text.prefix(40))") }
        return v
    }

    private func readCoordinate(_ s: inout JSONScanner, limit: Double) throws(DecodeFailure) -> Double? {
        guard let v = try readFlexDouble(&s) else { return nil }
        guard v >= -limit, v <= limit else { throw invalid("", "must be within ±\(Int(limit)), got \(v)") }
        return v
    }

    /// A non-negative integer, or a string holding one.
    private func readCount(_ s: inout JSONScanner) throws(DecodeFailure) -> Int64? {
        let v: Int64?
        if try s.peek() == UInt8(ascii: "\"") {
            let text = try s.readString()
            guard let n = Int64(text) else { throw invalid("", "expected an integer, got \(text.prefix(40))") }
            v = n
        } else {
            v = try s.readOptionalInt()
        }
        if let v, v < 0 { throw invalid("", "must not be negative, got \(v)") }
        return v
    }

    private func readStrings(_ s: inout JSONScanner) throws(DecodeFailure) -> [String] {
        if try s.consumeNull() { return [] }
        try s.beginArray()
        var out: [String] = []
        var first = true
        while try s.nextElement(&first) {
            guard out.count < s.limits.maxArrayElements else { throw s.tooManyElements() }
            do throws(DecodeFailure) { out.append(try s.readString()) } catch { throw error.under("[\(out.count)]") }
        }
        return out
    }

    private func readOptionalStrings(_ s: inout JSONScanner) throws(DecodeFailure) -> [String?] {
        if try s.consumeNull() { return [] }
        try s.beginArray()
        var out: [String?] = []
        var first = true
        while try s.nextElement(&first) {
            guard out.count < s.limits.maxArrayElements else { throw s.tooManyElements() }
            do throws(DecodeFailure) { out.append(try s.readOptionalString()) } catch { throw error.under("[\(out.count)]") }
        }
        return out
    }

    /// A list of category names, or one name (a single repeated form field).
    private func readCategories(_ s: inout JSONScanner) throws(DecodeFailure) -> [HangoutCategory] {
        let names: [String]
        if try s.peek() == UInt8(ascii: "\"") { names = [try s.readString()] } else { names = try readStrings(&s) }
        var out: [HangoutCategory] = []
        for (i, name) in names.enumerated() {
            guard let c = HangoutCategory(upstream: name) else {
                throw DecodeFailure(field: "[\(i)]", reason: .invalidValue, detail: "unknown category \(name.prefix(40))")
            }
            if !out.contains(c) { out.append(c) }
        }
        return out
    }

    /// `yyyy-MM-dd HH:mm` (no seconds, no zone) or any date-time ``LocalDateTime`` reads.
    private func readMeetTime(_ s: inout JSONScanner) throws(DecodeFailure) -> Int64? {
        if try s.consumeNull() { return nil }
        let offset = utcOffsetSeconds
        return try s.withStringBytes { raw throws(DecodeFailure) in
            var ms: Int64?
            if raw.count == 16 {
                var full = Array(raw)
                full.append(contentsOf: Array(":00".utf8))
                ms = full.withUnsafeBytes { LocalDateTime.epochMillis($0, defaultOffsetSeconds: offset) }
            } else {
                ms = LocalDateTime.epochMillis(raw, defaultOffsetSeconds: offset)
            }
            guard let ms else {
                throw invalid("", "expected yyyy-MM-dd HH:mm, got \(String(decoding: raw.prefix(40), as: UTF8.self))")
            }
            return ms
        }
    }

    // MARK: Events

    private func events(_ body: Body, user: String?) throws(DecodeFailure) -> [HangoutEvent] {
        switch body {
        case .bool(_, let path):
            throw invalid(path.isEmpty ? "$" : path, "a write acknowledgement (true/false) carries no event")
        case .null(let path):
            throw DecodeFailure(field: path.isEmpty ? "$" : path, reason: .emptyValue, detail: "null body")
        case .array(let items, let path):
            guard let head = items.first else {
                // An empty list: no hangouts, or a user without saved places.
                return user.map { [.savedPlaces(userId: $0, places: [])] } ?? []
            }
            if head.looksLikePlace {
                guard let user else { throw missingUser(path) }
                var places: [SavedPlace] = []
                for raw in items { places.append(try savedPlace(raw)) }
                return [.savedPlaces(userId: user, places: places)]
            }
            var out: [HangoutEvent] = []
            for raw in items { out.append(.hangout(try hangout(raw))) }
            return out
        case .object(let raw):
            if raw.envelope {
                guard let data = raw.data else { throw missing(raw.field("data")) }
                return try events(data, user: user)
            }
            if let list = raw.list {
                var out: [HangoutEvent] = []
                for item in list { out.append(.hangout(try hangout(item))) }
                return out
            }
            if raw.method != nil || raw.requestPath != nil { return [try request(raw, user: user)] }
            if raw.id != nil || raw.title != nil || raw.meetTime != nil { return [.hangout(try hangout(raw))] }
            if raw.hangoutNoti != nil || raw.newHangoutNoti != nil {
                guard let user else { throw missingUser(raw.path) }
                return [.settings(userId: user, try settings(raw))]
            }
            if let token = raw.fcmToken {
                guard let user else { throw missingUser(raw.path) }
                guard !token.isEmpty else { throw invalid(raw.field("fcmToken"), "empty token") }
                return [.fcmToken(userId: user, token: token)]
            }
            if raw.looksLikePlace { throw invalid(raw.path.isEmpty ? "$" : raw.path, "expected the list of saved places, got one place") }
            throw invalid(
                raw.path.isEmpty ? "$" : raw.path,
                "not a hangout, hangout list, request, saved places, notification settings or fcmToken message")
        }
    }

    private func missingUser(_ path: String) -> DecodeFailure {
        DecodeFailure(field: "header:\(userHeader)", reason: .missingField, detail: "a user-scoped message needs the user id header")
    }

    private func settings(_ raw: Raw) throws(DecodeFailure) -> HangoutNotificationSettings {
        guard let a = raw.hangoutNoti else { throw missing(raw.field("hangoutNoti")) }
        guard let b = raw.newHangoutNoti else { throw missing(raw.field("newHangoutNoti")) }
        return HangoutNotificationSettings(hangoutNoti: a, newHangoutNoti: b)
    }

    private func savedPlace(_ raw: Raw) throws(DecodeFailure) -> SavedPlace {
        guard let id = raw.locationID, !id.isEmpty else { throw missing(raw.field("locationID")) }
        guard let lat = raw.latitude else { throw missing(raw.field("latitude")) }
        guard let lng = raw.longitude else { throw missing(raw.field("longitude")) }
        return SavedPlace(
            id: id, name: raw.locationName, address: raw.locationAddress, latitude: lat, longitude: lng,
            isSelected: raw.isSelected ?? false)
    }

    /// A captured request without a JSON body.
    private func request(_ raw: Raw, user: String?) throws(DecodeFailure) -> HangoutEvent {
        guard let method = raw.method?.uppercased() else { throw missing(raw.field("method")) }
        guard let path = raw.requestPath else { throw missing(raw.field("path")) }
        let parts = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        let who = raw.userId ?? user
        switch (method, parts.count, parts.first) {
        case ("PUT", 2, "hangout"):
            guard let action = raw.action else { throw missing(raw.field("action")) }
            guard action == "join" || action == "cancel" else {
                throw invalid(raw.field("action"), "expected join or cancel, got \(action.prefix(20))")
            }
            guard let who, !who.isEmpty else { throw missing(raw.field("userId")) }
            return .membership(hangoutId: parts[1], userId: who, joined: action == "join")
        case ("DELETE", 2, "hangout"):
            return .cancelled(hangoutId: parts[1])
        case ("PUT", 2, "user") where parts[1] == "fcmToken":
            guard let who, !who.isEmpty else { throw missingUser(raw.path) }
            guard let token = raw.fcmToken, !token.isEmpty else { throw missing(raw.field("fcmToken")) }
            return .fcmToken(userId: who, token: token)
        case ("PUT", 1, "notification"):
            guard let who, !who.isEmpty else { throw missingUser(raw.path) }
            return .settings(userId: who, try settings(raw))
        default:
            throw invalid(raw.field("path"), "unsupported request \(method) \(path.prefix(60))")
        }
    }

    private func hangout(_ raw: Raw) throws(DecodeFailure) -> Hangout {
        guard let id = raw.id, !id.isEmpty else { throw missing(raw.field("hangoutInfoId")) }
        guard let title = raw.title, !title.isEmpty else { throw missing(raw.field("hangoutTitle")) }
        guard let plan = raw.plan else { throw missing(raw.field("hangoutPlan")) }
        guard let meetTime = raw.meetTime else { throw missing(raw.field("hangoutMeetTime")) }
        guard let language = raw.language, !language.isEmpty else { throw missing(raw.field("hangoutLanguage")) }
        guard let limit = raw.total else { throw missing(raw.field("hangoutTotalNum")) }
        guard limit >= 1 else { throw invalid(raw.field("hangoutTotalNum"), "must be at least 1, got \(limit)") }
        guard let placeName = raw.placeName, !placeName.isEmpty else { throw missing(raw.field("place.placeName")) }
        guard let lat = raw.placeLat else { throw missing(raw.field("place.placeLatitude")) }
        guard let lng = raw.placeLng else { throw missing(raw.field("place.placeLongitude")) }
        let joined = try pair(raw.joinIds, raw.joinImages, raw.field("hangoutJoinUserImageUrl"))
        let liked = try pair(raw.likeIds, raw.likeImages, raw.field("hangoutLikeUserImageUrl"))
        let current = raw.current ?? Int64(joined.count)
        guard current <= limit else {
            throw invalid(raw.field("hangoutCurrentNum"), "\(current) participants is above the limit of \(limit)")
        }
        return Hangout(
            id: id, title: title, plan: plan, meetTime: meetTime, language: language, categories: raw.categories ?? [],
            openChat: raw.openChat, limit: limit, currentCount: current, likeCount: raw.likes ?? Int64(liked.count),
            imageFile: raw.image, place: HangoutPlace(name: placeName, address: raw.placeAddress, latitude: lat, longitude: lng),
            status: raw.status ?? .open, joined: joined, liked: liked)
    }

    /// Pairs a user-id array with its parallel image array (absent images: none known).
    private func pair(_ ids: [String]?, _ images: [String?]?, _ field: String) throws(DecodeFailure) -> [HangoutUser] {
        let ids = ids ?? []
        if let images, images.count != ids.count {
            throw invalid(field, "\(images.count) images for \(ids.count) users: the parallel arrays differ in length")
        }
        let images = images ?? Array(repeating: nil, count: ids.count)
        // A user listed twice is kept once. Lists are short (the client caps a hangout at 30), so a
        // linear scan beats hashing; a Set takes over for hostile lengths.
        var out: [HangoutUser] = []
        out.reserveCapacity(ids.count)
        var seen: Set<String>? = ids.count > 32 ? [] : nil
        for (id, image) in zip(ids, images) {
            if seen != nil {
                guard seen!.insert(id).inserted else { continue }
            } else if out.contains(where: { $0.id == id }) {
                continue
            }
            out.append(HangoutUser(id: id, imageURL: image))
        }
        return out
    }
}
