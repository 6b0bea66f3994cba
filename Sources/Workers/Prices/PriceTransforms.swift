/// `prices.decode`: an Upbit ticker message in any accepted format → one normalised tick per
/// ticker on `prices.ticks` (key: market). Tombstones produce nothing. Stateless.
public struct PriceDecodeTransform: Transform {
    public var decoder: PriceTickDecoder
    public init(decoder: PriceTickDecoder = PriceTickDecoder()) { self.decoder = decoder }

    public var name: String { "prices.decode" }

    public func process(_ record: InputRecord, state: inout NoState, context: TransformContext, into out: inout TransformOutput) {
        guard let value = record.value else { return }
        let mark = out.mark
        do {
            // Streamed, each tick's JSON and dedupe key written straight into the output buffer:
            // this transform runs per record at the full rate of the price feed.
            var index = 0
            try decoder.decode(value) { tick in
                out.append(
                    output: "prices.ticks", key: marketKey(tick.market, of: record),
                    dedupeKey: { k in
                        k.append("tick:")
                        k.append(tick.market)
                        k.append(":")
                        k.append(tick.tradeTimestamp)
                        k.append(":")
                        k.appendIdentity(of: record)
                        k.append("#")
                        k.append(index)
                    },
                    value: { tick.write(to: &$0) })
                index += 1
            }
        } catch {
            // A list fails as a whole: no output for its earlier elements.
            out.discard(since: mark)
            out.fail(error)
        }
    }
}

/// `prices.latest`: the newest tick per market (by trade time) for a compacted topic
/// (`prices.latest`, key: market). Older or repeated ticks produce nothing, so out-of-order and
/// redelivered records are harmless.
public struct LatestTickerTransform: Transform {
    public struct State: Codable, Sendable, Equatable {
        /// market → (trade time, message time) of the last emitted tick.
        public var latest: [String: [Int64]] = [:]
        public init() {}
    }

    public var decoder: PriceTickDecoder
    public init(decoder: PriceTickDecoder = PriceTickDecoder()) { self.decoder = decoder }

    public var name: String { "prices.latest" }
    public var initialState: State { State() }

    public func process(_ record: InputRecord, state: inout State, context: TransformContext, into out: inout TransformOutput) {
        guard let value = record.value else { return }
        let ticks: [PriceTick]
        do { ticks = try decoder.decode(value) } catch { return out.fail(error) }
        for tick in ticks {
            let version = [tick.tradeTimestamp, tick.timestamp ?? 0]
            if let seen = state.latest[tick.market], !seen.lexicographicallyPrecedes(version) { continue }
            state.latest[tick.market] = version
            out.append(OutputRecord(
                output: "prices.latest", key: marketKey(tick.market, of: record), value: tick.jsonBytes(),
                dedupeKey: "latest:\(tick.market):\(version[0]):\(version[1])"))
        }
    }
}

/// An output keyed by market: the input's key when it already is the market (tickers are keyed
/// by market upstream), shared rather than copied per record; else the market's bytes.
private func marketKey(_ market: String, of input: InputRecord) -> [UInt8] {
    var market = market
    return market.withUTF8 { m in
        if let key = input.key, key.count == m.count, key.withUnsafeBufferPointer({ k in
            for i in 0..<k.count where k[i] != m[i] { return false }
            return true
        }) { return key }
        return Array(m)
    }
}
