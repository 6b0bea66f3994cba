/// `hangouts.decode`: Bappy messages (see ``HangoutDecoder``) → one typed event per hangout,
/// membership change, cancellation or user setting on `hangouts.events`, with an `event-type`
/// header. Hangout events are keyed by the hangout id; user events by the user id and carry
/// the user header. A cancellation is a tombstone keyed by the hangout id (compaction drops the
/// hangout). The values are in upstream shapes the decoder reads back, so this transform can feed
/// ``HangoutNotificationTransform`` in a chain. Stateless.
public struct HangoutDecodeTransform: Transform {
    public var decoder: HangoutDecoder

    public init(decoder: HangoutDecoder = HangoutDecoder()) { self.decoder = decoder }

    public var name: String { "hangouts.decode" }

    public func process(_ record: InputRecord, state: inout NoState, context: TransformContext, into out: inout TransformOutput) {
        let events: [HangoutEvent]
        do { events = try decoder.decode(record) } catch { return out.fail(error) }
        let id = record.identity
        out.append(contentsOf: events.enumerated().map { i, e in
            var headers = [RecordHeader("event-type", e.kind)]
            if let user = e.userId { headers.append(RecordHeader(decoder.userHeader, user)) }
            return OutputRecord(
                output: "hangouts.events", key: Array(e.key.utf8), value: e.jsonBytes(), headers: headers,
                dedupeKey: "hangout:\(e.kind):\(e.key):\(id)#\(i)")
        })
    }
}

/// `hangouts.notifications`: the pushes of the meetup app, as ``PushNotification``s on
/// `notifications` (rendered for FCM and APNs by ``NotificationRenderTransform``), one per user:
///
/// - **changed**: a hangout the user joined moved to another time or place (or was cancelled);
/// - **reminder**: it starts within ``reminderLeadMillis`` (an hour): sent by ``advance`` (or the
///   next record) once per hangout and meet time;
/// - **joined**: someone joined the user's hangout. The API has no owner field, so the organiser
///   is taken to be the first joiner (first in `hangoutJoinUserId`, or the first `join` seen);
///   the push says so in its data (`organiser: first-joiner`);
/// - **nearby**: a new open hangout lies within ``nearbyRadiusMeters`` (great-circle distance)
///   of one of the user's saved places (announced once, when the transform first sees it).
///
/// `hangoutNoti` gates the first three, `newHangoutNoti` the last (both default to on until the
/// user's settings are seen). A user's pushes go to their FCM token once the transform has seen one
/// (`PUT user/fcmToken`), else to the topic `hangouts-user-<id>`.
///
/// State: per hangout the last snapshot (time, place, status), participants and what was sent;
/// per user saved places, settings, token and when they were last notified. Hangouts are
/// evicted ``retainMillis`` after their meet time; the transform's clock is the largest `now` it
/// has seen, so a redelivered old record never brings an evicted hangout back to life.
public struct HangoutNotificationTransform: Transform {
    /// What a hangout looked like last time.
    public struct Snapshot: Codable, Sendable, Equatable {
        public var title: String
        public var meetTime: Int64
        public var place: HangoutPlace
        public var status: HangoutStatus
    }

    public struct Tracked: Codable, Sendable, Equatable {
        public var snapshot: Snapshot?
        /// Timestamp of the record the snapshot came from (older snapshots are ignored).
        public var version: Int64?
        public var participants: [String] = []
        public var organiser: String?
        public var cancelled = false
        /// Meet times a reminder went out for (the last few).
        public var reminded: [Int64] = []
        public var announced = false
        /// Joiners the organiser was told about.
        public var joinNotified: Set<String> = []
        public var firstSeen: Int64
    }

    public struct User: Codable, Sendable, Equatable {
        public var places: [SavedPlace] = []
        public var settings = HangoutNotificationSettings()
        public var token: String?
        public var lastNotifiedAt: Int64?
    }

    public struct State: Codable, Sendable, Equatable {
        public var hangouts: [String: Tracked] = [:]
        public var users: [String: User] = [:]
        /// The largest `now` seen.
        public var clock: Int64 = .min
        public init() {}
    }

    public var nearbyRadiusMeters: Double
    public var reminderLeadMillis: Int64
    public var retainMillis: Int64
    public var decoder: HangoutDecoder

    /// How long a hangout known only from joins (never seen itself) is kept.
    static let stubRetainMillis: Int64 = 7 * 86_400_000

    public init(
        nearbyRadiusMeters: Double = 3_000, reminderLeadMillis: Int64 = 3_600_000, retainMillis: Int64 = 86_400_000,
        decoder: HangoutDecoder = HangoutDecoder()
    ) {
        self.nearbyRadiusMeters = nearbyRadiusMeters
        self.reminderLeadMillis = reminderLeadMillis
        self.retainMillis = retainMillis
        self.decoder = decoder
    }

    public var name: String { "hangouts.notifications" }
    public var initialState: State { State() }

    public func process(_ record: InputRecord, state: inout State, context: TransformContext, into out: inout TransformOutput) {
        let events: [HangoutEvent]
        do { events = try decoder.decode(record) } catch { return out.fail(error) }
        state.clock = max(state.clock, context.now)
        let now = state.clock
        var outbox = Outbox(now: now)
        for event in events {
            switch event {
            case .hangout(let h): apply(h, version: record.timestamp, &state, &outbox)
            case .membership(let id, let user, let joined): membership(id, user, joined, &state, &outbox)
            case .cancelled(let id): cancel(id, &state, &outbox)
            case .savedPlaces(let u, let places): state.users[u, default: User()].places = places
            case .settings(let u, let s): state.users[u, default: User()].settings = s
            case .fcmToken(let u, let t): state.users[u, default: User()].token = t
            }
        }
        remind(&state, &outbox)
        evict(&state)
        outbox.deliver(&state, into: &out)
    }

    /// Sends the reminders that are due and evicts hangouts past their time.
    public func advance(state: inout State, context: TransformContext, into out: inout TransformOutput) {
        state.clock = max(state.clock, context.now)
        var outbox = Outbox(now: state.clock)
        remind(&state, &outbox)
        evict(&state)
        outbox.deliver(&state, into: &out)
    }

    // MARK: Events

    private func apply(_ h: Hangout, version: Int64, _ state: inout State, _ out: inout Outbox) {
        let now = out.now
        // Long past: it would be evicted at once; nothing to tell anyone.
        guard h.meetTime.saturatingAdd(retainMillis) >= now else { return }
        var t = state.hangouts[h.id] ?? Tracked(firstSeen: now)
        if let v = t.version, version < v { return }
        let previous = t.snapshot
        let snapshot = Snapshot(title: h.title, meetTime: h.meetTime, place: h.place, status: h.status)
        t.version = version
        t.snapshot = snapshot
        let ids = h.joined.map(\.id)
        // The API lists the creator first. Its first snapshot overrides an organiser guessed from
        // join events seen before it (a join may arrive before the hangout it is for).
        if previous == nil { t.organiser = ids.first ?? t.organiser } else if t.organiser == nil { t.organiser = ids.first }
        if previous != nil, let organiser = t.organiser {
            for user in ids where !t.participants.contains(user) && user != organiser && !t.joinNotified.contains(user) {
                t.joinNotified.insert(user)
                out.joined(h.id, title: h.title, joiner: user, organiser: organiser, state)
            }
        }
        t.participants = ids
        if let p = previous, !t.cancelled, p.meetTime != snapshot.meetTime || p.place != snapshot.place {
            let place = snapshot.place
            let spot = "\(place.name)|\(place.address ?? "")|\(place.latitude)|\(place.longitude)"
            let change = "\(snapshot.meetTime):\(stableHash(spot))"
            for user in t.participants {
                out.send(
                    to: user, hangout: h.id, kind: "changed", title: "Hangout changed",
                    body: "\(h.title) now meets at \(h.place.name), \(localTime(h.meetTime)).",
                    dedupe: "hangout:\(h.id):changed:\(change):\(user)", gate: \.hangoutNoti, state)
            }
        }
        if previous == nil, !t.announced, !t.cancelled, h.status == .open, h.meetTime > now {
            t.announced = true
            for user in state.users.keys.sorted() where !t.participants.contains(user) {
                guard let near = nearestPlace(of: user, to: h.place, state) else { continue }
                out.send(
                    to: user, hangout: h.id, kind: "nearby", title: "New hangout near \(near.name ?? "you")",
                    body: "\(h.title) at \(h.place.name).", dedupe: "hangout:\(h.id):nearby:\(user)",
                    gate: \.newHangoutNoti, state)
            }
        }
        state.hangouts[h.id] = t
    }

    private func membership(_ id: String, _ user: String, _ joined: Bool, _ state: inout State, _ out: inout Outbox) {
        var t = state.hangouts[id] ?? Tracked(firstSeen: out.now)
        if joined {
            if !t.participants.contains(user) { t.participants.append(user) }
            if let organiser = t.organiser {
                if user != organiser, t.joinNotified.insert(user).inserted {
                    out.joined(id, title: t.snapshot?.title, joiner: user, organiser: organiser, state)
                }
            } else {
                t.organiser = user  // the first joiner is the organiser (no owner field)
            }
        } else {
            t.participants.removeAll { $0 == user }
        }
        state.hangouts[id] = t
    }

    private func cancel(_ id: String, _ state: inout State, _ out: inout Outbox) {
        var t = state.hangouts[id] ?? Tracked(firstSeen: out.now)
        guard !t.cancelled else { return }
        t.cancelled = true
        let title = t.snapshot?.title ?? "A hangout you joined"
        for user in t.participants {
            out.send(
                to: user, hangout: id, kind: "cancelled", title: "Hangout cancelled", body: "\(title) was cancelled.",
                dedupe: "hangout:\(id):cancelled:\(user)", gate: \.hangoutNoti, state)
        }
        state.hangouts[id] = t
    }

    private func remind(_ state: inout State, _ out: inout Outbox) {
        let now = out.now
        for id in state.hangouts.keys.sorted() {
            guard var t = state.hangouts[id], let s = t.snapshot, !t.cancelled, s.status != .expired,
                now >= s.meetTime.saturatingSub(reminderLeadMillis), now < s.meetTime, !t.reminded.contains(s.meetTime)
            else { continue }
            t.reminded = Array((t.reminded + [s.meetTime]).suffix(4))
            for user in t.participants {
                out.send(
                    to: user, hangout: id, kind: "reminder", title: "Starting soon",
                    body: "\(s.title) starts within the hour at \(s.place.name).",
                    dedupe: "hangout:\(id):reminder:\(s.meetTime):\(user)", gate: \.hangoutNoti, state)
            }
            state.hangouts[id] = t
        }
    }

    private func evict(_ state: inout State) {
        let now = state.clock
        state.hangouts = state.hangouts.filter { _, t in
            if let s = t.snapshot { return s.meetTime.saturatingAdd(retainMillis) >= now }
            return t.firstSeen.saturatingAdd(Self.stubRetainMillis) >= now
        }
    }

    /// Great-circle (haversine) distance in metres between two points in degrees: what
    /// ``nearbyRadiusMeters`` is compared with.
    public static func distanceMeters(lat1: Double, lng1: Double, lat2: Double, lng2: Double) -> Double {
        GreatCircle.distanceMeters(lat1: lat1, lng1: lng1, lat2: lat2, lng2: lng2)
    }

    /// `yyyy-MM-dd HH:mm` at the decoder's offset: the app shows meet times in local time.
    private func localTime(_ millis: Int64) -> String {
        let iso = LocalDateTime.isoUTC(millis.saturatingAdd(Int64(decoder.utcOffsetSeconds) * 1000))
        return "\(iso.prefix(10)) \(iso.dropFirst(11).prefix(5))"
    }

    private func nearestPlace(of user: String, to place: HangoutPlace, _ state: State) -> SavedPlace? {
        var best: (SavedPlace, Double)?
        for p in state.users[user]?.places ?? [] {
            let d = GreatCircle.distanceMeters(lat1: p.latitude, lng1: p.longitude, lat2: place.latitude, lng2: place.longitude)
            if d <= nearbyRadiusMeters, best == nil || d < best!.1 { best = (p, d) }
        }
        return best?.0
    }

    /// Collects pushes for one call, honouring each user's settings, then records when users
    /// were last notified.
    private struct Outbox {
        let now: Int64
        var notifications: [(user: String, push: PushNotification)] = []

        mutating func send(
            to user: String, hangout: String, kind: String, title: String, body: String, dedupe: String,
            gate: KeyPath<HangoutNotificationSettings, Bool>, _ state: State, extra: [String: String] = [:]
        ) {
            let info = state.users[user] ?? User()
            guard info.settings[keyPath: gate] else { return }
            let recipient: PushNotification.Recipient = info.token.map { .token($0) } ?? .topic("hangouts-user-\(user)")
            var data = ["hangoutId": hangout, "kind": kind]
            data.merge(extra) { $1 }
            notifications.append((user, PushNotification(
                recipient: recipient, title: title, body: body, data: data, collapseKey: "hangout-\(hangout)-\(kind)",
                dedupeKey: dedupe)))
        }

        mutating func joined(_ id: String, title: String?, joiner: String, organiser: String, _ state: State) {
            send(
                to: organiser, hangout: id, kind: "joined", title: "Someone joined your hangout",
                body: "A new member joined \(title ?? "your hangout").", dedupe: "hangout:\(id):joined:\(joiner)",
                gate: \.hangoutNoti, state, extra: ["joinerId": joiner, "organiser": "first-joiner"])
        }

        func deliver(_ state: inout State, into out: inout TransformOutput) {
            for n in notifications { state.users[n.user, default: User()].lastNotifiedAt = now }
            out.append(contentsOf: notifications.map { $0.push.outputRecord() })
        }
    }
}

/// `hangouts.thumbnails`: the image of every hangout the API shows (`hangoutImageUrl`, a bare
/// file name the client prepends `<base>static-file/` to) becomes one ``ThumbnailRequest`` on
/// `thumbnails.requests` (key `hangout-<id>`), for the thumbnail worker. Stateless; the same
/// image gets the same dedupe key on every read of the hangout.
public struct HangoutThumbnailTransform: Transform {
    /// `<base>static-file/` of the meetup app's API: the image's URL is this plus the file name.
    public var imageBase: String
    public var decoder: HangoutDecoder

    public init(imageBase: String, decoder: HangoutDecoder = HangoutDecoder()) {
        self.imageBase = imageBase
        self.decoder = decoder
    }

    public var name: String { "hangouts.thumbnails" }

    public func process(_ record: InputRecord, state: inout NoState, context: TransformContext, into out: inout TransformOutput) {
        let events: [HangoutEvent]
        do { events = try decoder.decode(record) } catch { return out.fail(error) }
        for case .hangout(let h) in events {
            guard let file = h.imageFile, !file.isEmpty else { continue }
            out.append(
                ThumbnailRequest(owner: .hangout, ownerId: h.id, imageIndex: 0, sourceURL: imageBase + file).outputRecord())
        }
    }
}

extension HangoutDecodeTransform {
    public static let options = [TransformOption.utcOffset]
}

extension HangoutNotificationTransform {
    public static let options = [TransformOption.utcOffset]
}

extension HangoutThumbnailTransform {
    /// `hangout-image-base`: `<base>static-file/` of the meetup app's API, where hangout images are.
    public static let options = [
        TransformOption.utcOffset,
        TransformOption("hangout-image-base") { value, options throws(OptionError) in options.hangoutImageBase = try value.string() },
    ]
}
