/// `prices.decode`: an Upbit ticker message in any accepted format → one normalised tick per
/// ticker on `prices.ticks` (key: market). Tombstones produce nothing. Stateless.
public struct PriceDecodeStage: Stage {
    public var decoder: PriceTickDecoder
    public init(decoder: PriceTickDecoder = PriceTickDecoder()) { self.decoder = decoder }

    public var name: String { "prices.decode" }

    public func process(_ record: InputRecord, state: inout NoState, context: StageContext) -> StageOutput {
        guard let value = record.value else { return .empty }
        do {
            let ticks = try decoder.decode(value)
            let id = record.identity
            return StageOutput(records: ticks.enumerated().map { i, tick in
                OutputRecord(
                    output: "prices.ticks", key: Array(tick.market.utf8), value: tick.jsonBytes(),
                    dedupeKey: "tick:\(tick.market):\(tick.tradeTimestamp):\(id)#\(i)")
            })
        } catch {
            return StageOutput(failures: [error])
        }
    }
}

/// `prices.latest`: the newest tick per market (by trade time) for a compacted topic
/// (`prices.latest`, key: market). Older or repeated ticks produce nothing, so out-of-order and
/// redelivered records are harmless.
public struct LatestTickerStage: Stage {
    public struct State: Codable, Sendable, Equatable {
        /// market → (trade time, message time) of the last emitted tick.
        public var latest: [String: [Int64]] = [:]
        public init() {}
    }

    public var decoder: PriceTickDecoder
    public init(decoder: PriceTickDecoder = PriceTickDecoder()) { self.decoder = decoder }

    public var name: String { "prices.latest" }
    public var initialState: State { State() }

    public func process(_ record: InputRecord, state: inout State, context: StageContext) -> StageOutput {
        guard let value = record.value else { return .empty }
        let ticks: [PriceTick]
        do { ticks = try decoder.decode(value) } catch { return StageOutput(failures: [error]) }
        var out = StageOutput()
        for tick in ticks {
            let version = [tick.tradeTimestamp, tick.timestamp ?? 0]
            if let seen = state.latest[tick.market], !seen.lexicographicallyPrecedes(version) { continue }
            state.latest[tick.market] = version
            out.records.append(OutputRecord(
                output: "prices.latest", key: Array(tick.market.utf8), value: tick.jsonBytes(),
                dedupeKey: "latest:\(tick.market):\(version[0]):\(version[1])"))
        }
        return out
    }
}
