/// A stage and its state behind one concrete type, for callers that choose stages at run time
/// (`pipelinectl run`, a runtime configured by name). Generic code should prefer the stage type
/// itself; this only erases it.
public struct StageRunner: Sendable {
    private var box: any RunnerBox

    public init(_ stage: any Stage) {
        func make<S: Stage>(_ s: S) -> any RunnerBox { Box(stage: s, state: s.initialState) }
        box = make(stage)
    }

    public var name: String { box.name }

    public mutating func process(_ record: InputRecord, context: StageContext, into out: inout StageOutput) {
        box.process(record, context: context, into: &out)
    }

    public mutating func advance(context: StageContext, into out: inout StageOutput) {
        box.advance(context: context, into: &out)
    }

    /// One input's results on their own (tests, tools).
    public mutating func process(_ record: InputRecord, context: StageContext) -> StageOutput {
        var out = StageOutput()
        box.process(record, context: context, into: &out)
        return out
    }

    /// One `advance`'s results on their own (tests, tools).
    public mutating func advance(context: StageContext) -> StageOutput {
        var out = StageOutput()
        box.advance(context: context, into: &out)
        return out
    }

    /// False when the stage (every stage of a chain) keeps no state: then there is nothing to
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

    /// A checkpoint's state is not this stage's.
    public struct StateMismatch: Error, CustomStringConvertible {
        public var description: String
    }
}

/// A state that holds nothing: ``NoState`` and chains of stateless stages.
public protocol StatelessState {}
extension NoState: StatelessState {}
extension Chain.State: StatelessState where First.State: StatelessState, Second.State: StatelessState {}

private protocol RunnerBox: Sendable {
    var name: String { get }
    mutating func process(_ record: InputRecord, context: StageContext, into out: inout StageOutput)
    mutating func advance(context: StageContext, into out: inout StageOutput)
    var hasState: Bool { get }
    var stateValue: any Encodable { get }
    var stateType: any Decodable.Type { get }
    mutating func restore(_ state: any Decodable) throws(StageRunner.StateMismatch)
}

private struct Box<S: Stage>: RunnerBox {
    let stage: S
    var state: S.State
    var name: String { stage.name }
    var hasState: Bool { !(S.State.self is StatelessState.Type) }
    var stateValue: any Encodable { state }
    var stateType: any Decodable.Type { S.State.self }

    mutating func restore(_ restored: any Decodable) throws(StageRunner.StateMismatch) {
        guard let restored = restored as? S.State else {
            throw StageRunner.StateMismatch(description: "a checkpoint of \(type(of: restored)) cannot restore \(stage.name) (\(S.State.self))")
        }
        state = restored
    }

    mutating func process(_ record: InputRecord, context: StageContext, into out: inout StageOutput) {
        stage.process(record, state: &state, context: context, into: &out)
    }

    mutating func advance(context: StageContext, into out: inout StageOutput) {
        stage.advance(state: &state, context: context, into: &out)
    }
}

/// Chains stages chosen at run time (`a.then(b).then(c)` with the types opened one by one).
public func chain(_ stages: [any Stage]) -> (any Stage)? {
    guard var result = stages.first else { return nil }
    for next in stages.dropFirst() {
        func open<A: Stage>(_ a: A) -> any Stage {
            func openNext<B: Stage>(_ b: B) -> any Stage { Chain(a, b) }
            return openNext(next)
        }
        result = open(result)
    }
    return result
}

/// The stages `pipelinectl run --stage` knows by name, built from one set of options.
public struct StageCatalog: Sendable {
    /// Configuration shared by the catalog's stages (each uses the options that concern it).
    public struct Options: Sendable {
        public var limits = DecodeLimits.default
        /// Offset of zone-less upstream dates (Korean time by default).
        public var utcOffsetSeconds = 9 * 3600
        public var candleLatenessMillis: Int64 = 10_000
        public var feedTopN = 60
        public var feedCategories = CampaignFeedStage.defaultCategories
        public var feedUser = CampaignFeedStage.UserSource.header("user-id")
        public var newProductsIntervalMillis: Int64 = 5 * 60_000
        public var alerts: [WatchlistAlertStage.Subscription] = []
        /// "A new hangout near your saved places": great-circle radius in metres.
        public var hangoutNearbyRadiusMeters: Double = 3_000
        /// `<base>static-file/` of the meetup app's API, for hangout images (`hangouts.thumbnails`).
        public var hangoutImageBase = "http://127.0.0.1:8089/static-file/"
        /// The thumbnail worker's settings (`thumbnails.render`).
        public var thumbnails = ThumbnailOptions()
        public init() {}
    }

    /// A name that is not in the catalog.
    public struct UnknownStage: Error, CustomStringConvertible, Equatable {
        public var name: String
        public init(name: String) { self.name = name }
        public var description: String {
            "unknown stage '\(name)'; known stages: \(StageCatalog.names.joined(separator: ", "))"
        }
    }

    public var options: Options
    public init(options: Options = Options()) { self.options = options }

    /// Every stage name, in pipeline order.
    public static let names = [
        "pass-through",
        "prices.decode", "prices.latest", "prices.candles", "prices.alerts",
        "products.decode", "products.thumbnails", "products.new-notifications",
        "campaigns.feed", "campaigns.notifications",
        "hangouts.decode", "hangouts.notifications", "hangouts.thumbnails",
        "challenges.decode", "challenges.standings", "challenges.notifications", "challenges.thumbnails",
        "notifications.render",
    ]

    /// Stages that do I/O (``ConcurrentStage``): valid in a topology, each alone in its chain,
    /// built by the host that links their module (`pipelinectl worker`), not by this catalog.
    public static let concurrentNames = ["thumbnails.render"]

    public func stage(named name: String) throws(UnknownStage) -> any Stage {
        let prices = PriceTickDecoder(limits: options.limits)
        let products = ProductDecoder(limits: options.limits, utcOffsetSeconds: options.utcOffsetSeconds)
        let campaigns = CampaignDecoder(limits: options.limits, utcOffsetSeconds: options.utcOffsetSeconds)
        let hangouts = HangoutDecoder(limits: options.limits, utcOffsetSeconds: options.utcOffsetSeconds)
        let challenges = ChallengeDecoder(limits: options.limits)
        switch name {
        case "pass-through": return PassThroughStage()
        case "prices.decode": return PriceDecodeStage(decoder: prices)
        case "prices.latest": return LatestTickerStage(decoder: prices)
        case "prices.candles": return CandleStage(decoder: prices, allowedLatenessMillis: options.candleLatenessMillis)
        case "prices.alerts": return WatchlistAlertStage(subscriptions: options.alerts, decoder: prices)
        case "products.decode": return ProductDecodeStage(decoder: products)
        case "products.thumbnails": return ThumbnailRequestStage(decoder: products)
        case "products.new-notifications":
            return NewProductsNotificationStage(intervalMillis: options.newProductsIntervalMillis, decoder: products)
        case "campaigns.feed":
            return CampaignFeedStage(
                topN: options.feedTopN, categories: options.feedCategories, user: options.feedUser, decoder: campaigns)
        case "campaigns.notifications": return CampaignNotificationStage(decoder: campaigns)
        case "hangouts.decode": return HangoutDecodeStage(decoder: hangouts)
        case "hangouts.thumbnails": return HangoutThumbnailStage(imageBase: options.hangoutImageBase, decoder: hangouts)
        case "hangouts.notifications":
            return HangoutNotificationStage(nearbyRadiusMeters: options.hangoutNearbyRadiusMeters, decoder: hangouts)
        case "challenges.decode": return ChallengeDecodeStage(decoder: challenges)
        case "challenges.standings": return ChallengeStandingsStage(offsetSeconds: options.utcOffsetSeconds, decoder: challenges)
        case "challenges.notifications":
            return ChallengeNotificationStage(offsetSeconds: options.utcOffsetSeconds, decoder: challenges)
        case "challenges.thumbnails": return ChallengeThumbnailStage(decoder: challenges)
        case "notifications.render": return NotificationRenderStage(decoder: NotificationDecoder(limits: options.limits))
        default: throw UnknownStage(name: name)
        }
    }

    /// The option keys a stage takes in the topology's `options:` (what each means is written
    /// where the stage declares it).
    public static func options(forStage name: String) -> [StageOption] {
        switch name {
        case "prices.candles": CandleStage.options
        case "prices.alerts": WatchlistAlertStage.options
        case "products.decode": ProductDecodeStage.options
        case "products.thumbnails": ThumbnailRequestStage.options
        case "products.new-notifications": NewProductsNotificationStage.options
        case "campaigns.feed": CampaignFeedStage.options
        case "campaigns.notifications": CampaignNotificationStage.options
        case "hangouts.decode": HangoutDecodeStage.options
        case "hangouts.notifications": HangoutNotificationStage.options
        case "hangouts.thumbnails": HangoutThumbnailStage.options
        case "challenges.standings": ChallengeStandingsStage.options
        case "challenges.notifications": ChallengeNotificationStage.options
        case "thumbnails.render": ThumbnailOptions.stageOptions
        default: []
        }
    }

    /// The chain of the named stages, in order (`["prices.decode", "prices.candles"]`).
    public func runner(for names: [String]) throws(UnknownStage) -> StageRunner {
        var stages: [any Stage] = []
        for n in names { stages.append(try stage(named: n)) }
        guard let combined = chain(stages) else { throw UnknownStage(name: "") }
        return StageRunner(combined)
    }
}
