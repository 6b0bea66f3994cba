/// `prices.alerts`: watchlist alerts when a market's signed change rate crosses a subscriber's
/// threshold, once per crossing.
///
/// A positive threshold fires when the rate rises to or above it, a negative one when the rate
/// falls to or below it. The alert re-arms only after the rate is back on the other side, so a
/// rate hovering above +5 % alerts once. Ticks older than the last one seen for a market are
/// ignored (out of order, or redelivered). Alerts go out as ``PushNotification``s to the
/// subscriber's token on output `notifications`.
public struct WatchlistAlertTransform: Transform {
    public struct Subscription: Codable, Sendable, Hashable {
        /// Device or user token that receives the alert.
        public var subscriber: String
        public var market: String
        /// Signed ratio: 0.05 is +5 %, -0.03 is -3 %.
        public var threshold: Double

        public init(subscriber: String, market: String, threshold: Double) {
            self.subscriber = subscriber
            self.market = market
            self.threshold = threshold
        }

        var id: String { "\(subscriber)|\(market)|\(threshold)" }
    }

    public struct State: Codable, Sendable, Equatable {
        /// Subscription id → currently beyond its threshold.
        public var beyond: [String: Bool] = [:]
        /// Market → trade time of the last tick used.
        public var lastTick: [String: Int64] = [:]
        public init() {}
    }

    public var decoder: PriceTickDecoder
    /// Subscriptions by market, each with its id (the state's key, made once rather than per tick).
    private let byMarket: [String: [(subscription: Subscription, id: String)]]

    public init(subscriptions: [Subscription], decoder: PriceTickDecoder = PriceTickDecoder()) {
        self.decoder = decoder
        self.byMarket = Dictionary(grouping: subscriptions.map { ($0, $0.id) }, by: \.0.market)
    }

    public var name: String { "prices.alerts" }
    public var initialState: State { State() }

    public func process(_ record: InputRecord, state: inout State, context: TransformContext, into out: inout TransformOutput) {
        guard let value = record.value else { return }
        let ticks: [PriceTick]
        do { ticks = try decoder.decode(value) } catch { return out.fail(error) }
        for tick in ticks {
            guard let subs = byMarket[tick.market] else { continue }
            // One lookup of the market: its last trade time read and replaced in place.
            if let i = state.lastTick.index(forKey: tick.market) {
                if tick.tradeTimestamp <= state.lastTick.values[i] { continue }
                state.lastTick.values[i] = tick.tradeTimestamp
            } else {
                state.lastTick[tick.market] = tick.tradeTimestamp
            }
            for (sub, id) in subs {
                let isBeyond = sub.threshold >= 0 ? tick.signedChangeRate >= sub.threshold : tick.signedChangeRate <= sub.threshold
                let was = state.beyond.updateValue(isBeyond, forKey: id) ?? false
                guard isBeyond, !was else { continue }
                let percent = formatPercent(tick.signedChangeRate)
                let n = PushNotification(
                    recipient: .token(sub.subscriber),
                    title: "\(tick.market) \(percent)",
                    body: "\(tick.market) is at \(formatPrice(tick.tradePrice)), \(percent) today (your alert: \(formatPercent(sub.threshold))).",
                    data: ["market": tick.market, "kind": "price-alert"],
                    collapseKey: "price-alert-\(tick.market)",
                    dedupeKey: "alert:\(id):\(tick.tradeTimestamp)")
                out.append(n.outputRecord())
            }
        }
    }
}

/// `+1.27%` from 0.0127 (two decimals, no Foundation formatter).
func formatPercent(_ ratio: Double) -> String {
    let hundredths = Int64(abs(ratio) * 10_000 + 0.5)  // half-up; avoids libm in Workers
    let sign = ratio < 0 ? "-" : "+"
    let frac = hundredths % 100
    return "\(sign)\(hundredths / 100).\(frac < 10 ? "0" : "")\(frac)%"
}

func formatPrice(_ v: Double) -> String {
    if abs(v) < 1e15, v == Double(Int64(v)) { return String(Int64(v)) }
    return v.description
}

extension WatchlistAlertTransform {
    /// `alerts`: a list of `{subscriber, market, threshold}`; threshold is a signed ratio (0.05 is +5 %).
    public static let options = [
        TransformOption("alerts") { value, options throws(OptionError) in
            options.alerts += try value.list("{subscriber, market, threshold}") { item throws(OptionError) in
                var subscriber: String?, market: String?, threshold: Double?
                try item.mapping(allowed: ["subscriber", "market", "threshold"]) { key, v throws(OptionError) in
                    switch key {
                    case "subscriber": subscriber = try v.string()
                    case "market": market = try v.string()
                    default:
                        guard let d = try? v.double() else { throw OptionError(v, "expected a signed ratio such as 0.05 (+5 %) or -0.03") }
                        threshold = d
                    }
                }
                guard let subscriber, let market, let threshold else { throw OptionError(item, "an alert needs subscriber, market and threshold") }
                return Subscription(subscriber: subscriber, market: market, threshold: threshold)
            }
        }
    ]
}
