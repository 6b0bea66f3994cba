/// The hangout categories the Bappy client offers, with the API's spelling as raw value
/// (`Projcets` is the API's, sic).
public enum HangoutCategory: String, Sendable, Hashable, Codable, CaseIterable {
    case travel = "Travel", eatOut = "Eat out", cafe = "Cafe", cooking = "Cooking", vegan = "Vegan", bar = "Bar"
    case languagePractice = "Language Practice", discussion = "Discussion", dance = "Dance", kpop = "K-POP"
    case study = "Study", read = "Read", instruments = "Instruments", draw = "Draw", movie = "Movie"
    case exhibition = "Exhibition", museum = "Museum", festival = "Festival", concerts = "Concerts", party = "Party"
    case picnic = "Picnic", boardgame = "Boardgame", sports = "Sports", volunteer = "Volunteer"
    case projects = "Projcets", career = "Career"

    /// The upstream name; `Projects`, the correct spelling, is accepted too in case the API is fixed.
    public init?(upstream: String) {
        if upstream == "Projects" { self = .projects; return }
        self.init(rawValue: upstream)
    }
}

/// `hangoutStatus`: "open", "closed", anything else means expired.
public enum HangoutStatus: String, Sendable, Hashable, Codable {
    case open, closed, expired
}

/// Where a hangout meets (`place{…}` on read, flattened fields on write).
public struct HangoutPlace: Sendable, Hashable, Codable {
    public var name: String
    /// Absent in edit forms (`PATCH hangout/{id}` sends no `placeAddress`).
    public var address: String?
    public var latitude: Double
    public var longitude: Double

    public init(name: String, address: String?, latitude: Double, longitude: Double) {
        self.name = name
        self.address = address
        self.latitude = latitude
        self.longitude = longitude
    }
}

/// A user in one of a hangout's user lists, paired with the image at the same index of the
/// parallel image array.
public struct HangoutUser: Sendable, Hashable, Codable {
    public var id: String
    public var imageURL: String?

    public init(id: String, imageURL: String? = nil) {
        self.id = id
        self.imageURL = imageURL
    }
}

/// A validated Bappy hangout (meetup).
public struct Hangout: Sendable, Hashable, Codable {
    public var id: String
    public var title: String
    public var plan: String
    /// Epoch ms (upstream: `yyyy-MM-dd HH:mm`, local time without a zone).
    public var meetTime: Int64
    public var language: String
    public var categories: [HangoutCategory]
    public var openChat: String?
    /// Most participants (`hangoutTotalNum`).
    public var limit: Int64
    /// Participants now (`hangoutCurrentNum`).
    public var currentCount: Int64
    public var likeCount: Int64
    /// A bare file name; the client prepends `<base>static-file/`.
    public var imageFile: String?
    public var place: HangoutPlace
    public var status: HangoutStatus
    /// Joined users in the API's order. There is no owner field: the first joiner is taken as
    /// the organiser (see ``organiserId``).
    public var joined: [HangoutUser]
    public var liked: [HangoutUser]

    public init(
        id: String, title: String, plan: String, meetTime: Int64, language: String, categories: [HangoutCategory],
        openChat: String? = nil, limit: Int64, currentCount: Int64, likeCount: Int64 = 0, imageFile: String? = nil,
        place: HangoutPlace, status: HangoutStatus = .open, joined: [HangoutUser] = [], liked: [HangoutUser] = []
    ) {
        self.id = id
        self.title = title
        self.plan = plan
        self.meetTime = meetTime
        self.language = language
        self.categories = categories
        self.openChat = openChat
        self.limit = limit
        self.currentCount = currentCount
        self.likeCount = likeCount
        self.imageFile = imageFile
        self.place = place
        self.status = status
        self.joined = joined
        self.liked = liked
    }

    /// The API has no host/owner field; the creator joins first, so the first joiner is taken
    /// as the organiser (an inference, not an upstream fact).
    public var organiserId: String? { joined.first?.id }

    /// The API's read shape (camelCase, `place{…}`, parallel user arrays), with the meet time in
    /// UTC with `Z`; ``HangoutDecoder`` reads it back unchanged.
    public func jsonBytes() -> [UInt8] {
        var w = JSONWriter(capacity: 512)
        w.beginObject()
        w.key("hangoutInfoId"); w.string(id)
        w.key("hangoutTitle"); w.string(title)
        w.key("hangoutPlan"); w.string(plan)
        w.key("hangoutMeetTime"); w.string(LocalDateTime.isoUTC(meetTime))
        w.key("hangoutLanguage"); w.string(language)
        w.key("hangoutCategory"); w.beginArray(); for c in categories { w.string(c.rawValue) }; w.endArray()
        if let openChat { w.key("hangoutOpenChat"); w.string(openChat) }
        w.key("hangoutTotalNum"); w.int(limit)
        w.key("hangoutCurrentNum"); w.int(currentCount)
        w.key("hangoutLikeCount"); w.int(likeCount)
        if let imageFile { w.key("hangoutImageUrl"); w.string(imageFile) }
        w.key("place")
        w.beginObject()
        w.key("placeName"); w.string(place.name)
        if let a = place.address { w.key("placeAddress"); w.string(a) }
        w.key("placeLatitude"); w.double(place.latitude)
        w.key("placeLongitude"); w.double(place.longitude)
        w.endObject()
        func users(_ ids: String, _ images: String, _ list: [HangoutUser]) {
            w.key(text: ids); w.beginArray(); for u in list { w.string(u.id) }; w.endArray()
            w.key(text: images); w.beginArray(); for u in list { w.optional(u.imageURL) }; w.endArray()
        }
        users("hangoutJoinUserId", "hangoutJoinUserImageUrl", joined)
        users("hangoutLikeUserId", "hangoutLikeUserImageUrl", liked)
        w.key("hangoutStatus"); w.string(status.rawValue)
        w.endObject()
        return w.bytes
    }
}

/// A saved place of a user (`GET user/locations`).
public struct SavedPlace: Sendable, Hashable, Codable {
    public var id: String
    public var name: String?
    public var address: String?
    public var latitude: Double
    public var longitude: Double
    public var isSelected: Bool

    public init(id: String, name: String? = nil, address: String? = nil, latitude: Double, longitude: Double, isSelected: Bool = false) {
        self.id = id
        self.name = name
        self.address = address
        self.latitude = latitude
        self.longitude = longitude
        self.isSelected = isSelected
    }
}

/// `GET/PUT notification`: which pushes the user wants.
public struct HangoutNotificationSettings: Sendable, Hashable, Codable {
    /// Pushes about hangouts the user joined or organises.
    public var hangoutNoti: Bool
    /// "A new hangout near your saved places".
    public var newHangoutNoti: Bool

    public init(hangoutNoti: Bool = true, newHangoutNoti: Bool = true) {
        self.hangoutNoti = hangoutNoti
        self.newHangoutNoti = newHangoutNoti
    }
}

/// One typed event from the Bappy stream.
public enum HangoutEvent: Sendable, Hashable, Codable {
    /// A hangout as the API shows it (create, edit, or a read of it): an upsert by id.
    case hangout(Hangout)
    /// `PUT hangout/{id}` with `action` = `join` (joined) or `cancel` (left).
    case membership(hangoutId: String, userId: String, joined: Bool)
    /// `DELETE hangout/{id}`: the hangout is cancelled.
    case cancelled(hangoutId: String)
    /// `GET user/locations` for a user: the complete list of saved places.
    case savedPlaces(userId: String, places: [SavedPlace])
    /// `GET/PUT notification` for a user.
    case settings(userId: String, HangoutNotificationSettings)
    /// `PUT user/fcmToken`.
    case fcmToken(userId: String, token: String)

    /// The record key the decode transform uses: the hangout id, or the user id for user events.
    public var key: String {
        switch self {
        case .hangout(let h): return h.id
        case .membership(let id, _, _), .cancelled(let id): return id
        case .savedPlaces(let u, _), .settings(let u, _), .fcmToken(let u, _): return u
        }
    }

    /// Short name of the kind (`event-type` header, dedupe keys).
    public var kind: String {
        switch self {
        case .hangout: return "hangout"
        case .membership(_, _, let joined): return joined ? "join" : "leave"
        case .cancelled: return "cancelled"
        case .savedPlaces: return "saved-places"
        case .settings: return "settings"
        case .fcmToken: return "fcm-token"
        }
    }

    /// The user the event is about, for events that travel with a `user-id` header.
    public var userId: String? {
        switch self {
        case .savedPlaces(let u, _), .settings(let u, _), .fcmToken(let u, _): return u
        default: return nil
        }
    }

    /// The event in an upstream shape that ``HangoutDecoder`` reads back to the same event
    /// (user events need the `user-id` header, ``userId``); nil for a cancellation, which is
    /// produced as a tombstone keyed by the hangout id.
    public func jsonBytes() -> [UInt8]? {
        var w = JSONWriter()
        switch self {
        case .hangout(let h): return h.jsonBytes()
        case .cancelled: return nil
        case .membership(let id, let user, let joined):
            w.beginObject()
            w.key("method"); w.string("PUT")
            w.key("path"); w.string("hangout/" + id)
            w.key("userId"); w.string(user)
            w.key("form"); w.beginObject(); w.key("action"); w.string(joined ? "join" : "cancel"); w.endObject()
            w.endObject()
        case .savedPlaces(_, let places):
            w.beginArray()
            for p in places {
                w.beginObject()
                w.key("locationID"); w.string(p.id)
                if let n = p.name { w.key("locationName"); w.string(n) }
                if let a = p.address { w.key("locationAddress"); w.string(a) }
                w.key("latitude"); w.double(p.latitude)
                w.key("longitude"); w.double(p.longitude)
                w.key("isSelected"); w.bool(p.isSelected)
                w.endObject()
            }
            w.endArray()
        case .settings(_, let s):
            w.beginObject()
            w.key("hangoutNoti"); w.bool(s.hangoutNoti)
            w.key("newHangoutNoti"); w.bool(s.newHangoutNoti)
            w.endObject()
        case .fcmToken(_, let token):
            w.beginObject(); w.key("fcmToken"); w.string(token); w.endObject()
        }
        return w.bytes
    }
}
