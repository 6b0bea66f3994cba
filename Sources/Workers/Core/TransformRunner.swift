/// A transform and its state behind one concrete type, for callers that choose transforms at run time
/// (`pipelinectl run`, a runtime configured by name). Generic code should prefer the transform type
/// itself; this only erases it.
public struct TransformRunner: Sendable {
    private var box: any RunnerBox

    public init(_ stage: any Transform) {
        func make<S: Transform>(_ s: S) -> any RunnerBox { Box(stage: s, state: s.initialState) }
        box = make(stage)
    }

    public var name: String { box.name }

    public mutating func process(_ record: InputRecord, context: TransformContext, into out: inout TransformOutput) {
        box.process(record, context: context, into: &out)
    }

    public mutating func advance(context: TransformContext, into out: inout TransformOutput) {
        box.advance(context: context, into: &out)
    }

    /// One input's results on their own (tests, tools).
    public mutating func process(_ record: InputRecord, context: TransformContext) -> TransformOutput {
        var out = TransformOutput()
        box.process(record, context: context, into: &out)
        return out
    }

    /// One `advance`'s results on their own (tests, tools).
    public mutating func advance(context: TransformContext) -> TransformOutput {
        var out = TransformOutput()
        box.advance(context: context, into: &out)
        return out
    }

    /// False when the transform (every transform of a chain) keeps no state: then there is nothing to
    /// checkpoint and an input is done once its outputs are delivered.
    public var hasState: Bool { box.hasState }

    /// The current state, for a checkpoint (the runtime picks the encoder; Workers has no Foundation).
    public var state: any Encodable { box.stateValue }

    /// The state's type, to decode a checkpoint with.
    public var stateType: any Decodable.Type { box.stateType }

    /// Replaces the state with a decoded checkpoint. Throws when it is of another type.
    public mutating func restore(_ state: any Decodable) throws(StateMismatch) {
        try box.restore(state)
    }

    /// A checkpoint's state is not this transform's.
    public struct StateMismatch: Error, CustomStringConvertible {
        public var description: String
    }
}

/// A state that holds nothing: ``NoState`` and chains of stateless transforms.
public protocol StatelessState {}
extension NoState: StatelessState {}
extension Chain.State: StatelessState where First.State: StatelessState, Second.State: StatelessState {}

private protocol RunnerBox: Sendable {
    var name: String { get }
    mutating func process(_ record: InputRecord, context: TransformContext, into out: inout TransformOutput)
    mutating func advance(context: TransformContext, into out: inout TransformOutput)
    var hasState: Bool { get }
    var stateValue: any Encodable { get }
    var stateType: any Decodable.Type { get }
    mutating func restore(_ state: any Decodable) throws(TransformRunner.StateMismatch)
}

private struct Box<S: Transform>: RunnerBox {
    let stage: S
    var state: S.State
    var name: String { stage.name }
    var hasState: Bool { !(S.State.self is StatelessState.Type) }
    var stateValue: any Encodable { state }
    var stateType: any Decodable.Type { S.State.self }

    mutating func restore(_ restored: any Decodable) throws(TransformRunner.StateMismatch) {
        guard let restored = restored as? S.State else {
            throw TransformRunner.StateMismatch(description: "a checkpoint of \(type(of: restored)) cannot restore \(stage.name) (\(S.State.self))")
        }
        state = restored
    }

    mutating func process(_ record: InputRecord, context: TransformContext, into out: inout TransformOutput) {
        stage.process(record, state: &state, context: context, into: &out)
    }

    mutating func advance(context: TransformContext, into out: inout TransformOutput) {
        stage.advance(state: &state, context: context, into: &out)
    }
}

/// Chains transforms chosen at run time (`a.then(b).then(c)` with the types opened one by one).
public func chain(_ stages: [any Transform]) -> (any Transform)? {
    guard var result = stages.first else { return nil }
    for next in stages.dropFirst() {
        func open<A: Transform>(_ a: A) -> any Transform {
            func openNext<B: Transform>(_ b: B) -> any Transform { Chain(a, b) }
            return openNext(next)
        }
        result = open(result)
    }
    return result
}

/// The transforms `pipelinectl run --transform` knows by name, built from one set of options.
public struct TransformCatalog: Sendable {
    /// Configuration shared by the catalog's transforms (each uses the options that concern it).
    public struct Options: Sendable {
        public var limits = DecodeLimits.default
        /// Offset of zone-less upstream dates (Korean time by default).
        public var utcOffsetSeconds = 9 * 3600
        public var candleLatenessMillis: Int64 = 10_000
        public var feedTopN = 60
        public var feedCategories = CampaignFeedTransform.defaultCategories
        public var feedUser = CampaignFeedTransform.UserSource.header("user-id")
        public var newProductsIntervalMillis: Int64 = 5 * 60_000
        public var alerts: [WatchlistAlertTransform.Subscription] = []
        /// "A new hangout near your saved places": great-circle radius in metres.
        public var hangoutNearbyRadiusMeters: Double = 3_000
        /// `<base>static-file/` of the meetup app's API, for hangout images (`hangouts.thumbnails`).
        public var hangoutImageBase = "http://127.0.0.1:8089/static-file/"
        /// The thumbnail worker's settings (`thumbnails.render`).
        public var thumbnails = ThumbnailOptions()
        /// A push sender's settings (`push.fcm`, `push.apns`).
        public var push = PushOptions()
        public init() {}
    }

    /// A name that is not in the catalog.
    public struct UnknownTransform: Error, CustomStringConvertible, Equatable {
        public var name: String
        public init(name: String) { self.name = name }
        public var description: String {
            "unknown stage '\(name)'; known stages: \(TransformCatalog.names.joined(separator: ", "))"
        }
    }

    public var options: Options
    public init(options: Options = Options()) { self.options = options }

    /// Every transform name, in pipeline order.
    public static let names = [
        "pass-through",
        "prices.decode", "prices.latest", "prices.candles", "prices.alerts",
        "products.decode", "products.thumbnails", "products.new-notifications",
        "campaigns.feed", "campaigns.notifications",
        "hangouts.decode", "hangouts.notifications", "hangouts.thumbnails",
        "challenges.decode", "challenges.standings", "challenges.notifications", "challenges.thumbnails",
        "notifications.render",
    ]

    /// Transforms that do I/O (``ConcurrentTransform``): valid in a topology, each alone in its chain,
    /// built by the host that links their module (`pipelinectl worker`), not by this catalog.
    public static let concurrentNames = ["thumbnails.render", "push.fcm", "push.apns"]

    public func transform(named name: String) throws(UnknownTransform) -> any Transform {
        let prices = PriceTickDecoder(limits: options.limits)
        let products = ProductDecoder(limits: options.limits, utcOffsetSeconds: options.utcOffsetSeconds)
        let campaigns = CampaignDecoder(limits: options.limits, utcOffsetSeconds: options.utcOffsetSeconds)
        let hangouts = HangoutDecoder(limits: options.limits, utcOffsetSeconds: options.utcOffsetSeconds)
        let challenges = ChallengeDecoder(limits: options.limits)
        switch name {
        case "pass-through": return PassThroughTransform()
        case "prices.decode": return PriceDecodeTransform(decoder: prices)
        case "prices.latest": return LatestTickerTransform(decoder: prices)
        case "prices.candles": return CandleTransform(decoder: prices, allowedLatenessMillis: options.candleLatenessMillis)
        case "prices.alerts": return WatchlistAlertTransform(subscriptions: options.alerts, decoder: prices)
        case "products.decode": return ProductDecodeTransform(decoder: products)
        case "products.thumbnails": return ThumbnailRequestTransform(decoder: products)
        case "products.new-notifications":
            return NewProductsNotificationTransform(intervalMillis: options.newProductsIntervalMillis, decoder: products)
        case "campaigns.feed":
            return CampaignFeedTransform(
                topN: options.feedTopN, categories: options.feedCategories, user: options.feedUser, decoder: campaigns)
        case "campaigns.notifications": return CampaignNotificationTransform(decoder: campaigns)
        case "hangouts.decode": return HangoutDecodeTransform(decoder: hangouts)
        case "hangouts.thumbnails": return HangoutThumbnailTransform(imageBase: options.hangoutImageBase, decoder: hangouts)
        case "hangouts.notifications":
            return HangoutNotificationTransform(nearbyRadiusMeters: options.hangoutNearbyRadiusMeters, decoder: hangouts)
        case "challenges.decode": return ChallengeDecodeTransform(decoder: challenges)
        case "challenges.standings": return ChallengeStandingsTransform(offsetSeconds: options.utcOffsetSeconds, decoder: challenges)
        case "challenges.notifications":
            return ChallengeNotificationTransform(offsetSeconds: options.utcOffsetSeconds, decoder: challenges)
        case "challenges.thumbnails": return ChallengeThumbnailTransform(decoder: challenges)
        case "notifications.render": return NotificationRenderTransform(decoder: NotificationDecoder(limits: options.limits))
        default: throw UnknownTransform(name: name)
        }
    }

    /// The option keys a stage takes in the topology's `options:` (what each means is written
    /// where the transform declares it).
    public static func options(forStage name: String) -> [TransformOption] {
        switch name {
        case "prices.candles": CandleTransform.options
        case "prices.alerts": WatchlistAlertTransform.options
        case "products.decode": ProductDecodeTransform.options
        case "products.thumbnails": ThumbnailRequestTransform.options
        case "products.new-notifications": NewProductsNotificationTransform.options
        case "campaigns.feed": CampaignFeedTransform.options
        case "campaigns.notifications": CampaignNotificationTransform.options
        case "hangouts.decode": HangoutDecodeTransform.options
        case "hangouts.notifications": HangoutNotificationTransform.options
        case "hangouts.thumbnails": HangoutThumbnailTransform.options
        case "challenges.standings": ChallengeStandingsTransform.options
        case "challenges.notifications": ChallengeNotificationTransform.options
        case "thumbnails.render": ThumbnailOptions.stageOptions
        case "push.fcm": PushOptions.fcmStageOptions
        case "push.apns": PushOptions.apnsStageOptions
        default: []
        }
    }

    /// The chain of the named transforms, in order (`["prices.decode", "prices.candles"]`).
    public func runner(for names: [String]) throws(UnknownTransform) -> TransformRunner {
        var stages: [any Transform] = []
        for n in names { stages.append(try transform(named: n)) }
        guard let combined = chain(stages) else { throw UnknownTransform(name: "") }
        return TransformRunner(combined)
    }
}
