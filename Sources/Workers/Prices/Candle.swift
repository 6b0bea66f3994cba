/// One-minute OHLCV candle of one market, in Upbit's minute-candle shape.
public struct Candle: Sendable, Hashable, Codable {
    public var market: String
    /// Start of the minute, epoch ms (UTC).
    public var minuteStart: Int64
    public var open: Double
    public var high: Double
    public var low: Double
    public var close: Double
    /// Σ price × volume.
    public var accTradePrice: Double
    public var accTradeVolume: Double
    /// Trade time of the last tick in the candle.
    public var lastTradeTimestamp: Int64
    /// Trade time of the first tick (open is the earliest trade, close the latest, whatever the arrival order).
    public var firstTradeTimestamp: Int64
    public var tickCount: Int

    public init(
        market: String, minuteStart: Int64, open: Double, high: Double, low: Double, close: Double,
        accTradePrice: Double, accTradeVolume: Double, lastTradeTimestamp: Int64, firstTradeTimestamp: Int64,
        tickCount: Int
    ) {
        self.market = market
        self.minuteStart = minuteStart
        self.open = open
        self.high = high
        self.low = low
        self.close = close
        self.accTradePrice = accTradePrice
        self.accTradeVolume = accTradeVolume
        self.lastTradeTimestamp = lastTradeTimestamp
        self.firstTradeTimestamp = firstTradeTimestamp
        self.tickCount = tickCount
    }

    /// Upbit minute-candle JSON: `market`, `candle_date_time_utc`, OHLC, `candle_acc_trade_price`,
    /// `candle_acc_trade_volume`, `timestamp`, `unit`.
    public func jsonBytes() -> [UInt8] {
        var w = JSONWriter()
        w.beginObject()
        w.key("market"); w.string(market)
        w.key("candle_date_time_utc"); w.string(String(LocalDateTime.isoUTC(minuteStart).prefix(19)))
        w.key("opening_price"); w.double(open)
        w.key("high_price"); w.double(high)
        w.key("low_price"); w.double(low)
        w.key("trade_price"); w.double(close)
        w.key("timestamp"); w.int(lastTradeTimestamp)
        w.key("candle_acc_trade_price"); w.double(accTradePrice)
        w.key("candle_acc_trade_volume"); w.double(accTradeVolume)
        w.key("unit"); w.int(1)
        w.endObject()
        return w.bytes
    }
}

/// `prices.candles`: one-minute candles per market by trade time.
///
/// A candle is emitted (output `prices.candles.1m`, key `market|minute`) once the event-time
/// watermark — the latest trade time seen on any market — passes the end of its minute plus
/// ``allowedLatenessMillis``. Until then a late tick is folded in (the candle is corrected before
/// it is published); after that it is dropped and counted in ``State/droppedLate``. Repeated
/// ticks (same market, trade time, message time, price and volume) are counted once, so
/// redelivery does not inflate volume. A minute with no trade has no candle.
public struct CandleTransform: Transform {
    public struct State: Codable, Sendable, Equatable {
        /// Open candles by market, then minute start (changed only by ``CandleTransform/add(_:to:)``
        /// and ``CandleTransform/closeReady(_:)``, which keep `nextCloseAt` right).
        public internal(set) var open: [String: [Int64: OpenCandle]] = [:]
        /// Highest trade time seen.
        public var watermark: Int64 = .min
        /// Start of the newest minute already emitted per market; ticks at or before it are late.
        public var closedThrough: [String: Int64] = [:]
        /// Ticks dropped for arriving after their minute was published.
        public var droppedLate: Int = 0
        /// No open candle closes while the watermark is below this: the earliest close time of
        /// the open candles, `.max` for none, `.min` for not known (a state read from a
        /// checkpoint), so that ``CandleTransform/closeReady(_:)`` looks at every candle only when
        /// one may close, not on every tick. Derived from `open`: neither encoded nor compared.
        var nextCloseAt: Int64 = .min

        public init() {}

        private enum CodingKeys: String, CodingKey { case open, watermark, closedThrough, droppedLate }

        public static func == (a: State, b: State) -> Bool {
            a.open == b.open && a.watermark == b.watermark && a.closedThrough == b.closedThrough
                && a.droppedLate == b.droppedLate
        }
    }

    /// A candle being built, with the identities of its ticks for duplicate detection.
    public struct OpenCandle: Codable, Sendable, Equatable {
        public var candle: Candle
        public var tickIds: Set<TickID>

        /// Folds a tick of this candle's minute in; false (and nothing changed) for a repeated one.
        mutating func fold(_ tick: PriceTick, id: TickID) -> Bool {
            guard tickIds.insert(id).inserted else { return false }
            if tick.tradeTimestamp < candle.firstTradeTimestamp {
                candle.open = tick.tradePrice
                candle.firstTradeTimestamp = tick.tradeTimestamp
            }
            if tick.tradeTimestamp >= candle.lastTradeTimestamp {
                candle.close = tick.tradePrice
                candle.lastTradeTimestamp = tick.tradeTimestamp
            }
            candle.high = max(candle.high, tick.tradePrice)
            candle.low = min(candle.low, tick.tradePrice)
            candle.accTradePrice += tick.tradePrice * tick.tradeVolume
            candle.accTradeVolume += tick.tradeVolume
            candle.tickCount += 1
            return true
        }
    }

    public struct TickID: Codable, Sendable, Hashable {
        var tradeTimestamp: Int64
        var timestamp: Int64
        var price: Double
        var volume: Double
    }

    public var decoder: PriceTickDecoder
    public var allowedLatenessMillis: Int64
    public static let minute: Int64 = 60_000

    public init(decoder: PriceTickDecoder = PriceTickDecoder(), allowedLatenessMillis: Int64 = 10_000) {
        self.decoder = decoder
        self.allowedLatenessMillis = allowedLatenessMillis
    }

    public var name: String { "prices.candles" }
    public var initialState: State { State() }

    public func process(_ record: InputRecord, state: inout State, context: TransformContext, into out: inout TransformOutput) {
        guard let value = record.value else { return }
        let ticks: [PriceTick]
        do { ticks = try decoder.decode(value) } catch { return out.fail(error) }
        for tick in ticks {
            add(tick, to: &state)
            out.append(contentsOf: closeReady(&state))
        }
    }

    /// Folds one tick into its candle (or counts it as late). Exposed for property tests.
    public func add(_ tick: PriceTick, to state: inout State) {
        let minute = floorMinute(tick.tradeTimestamp)
        if let closed = state.closedThrough[tick.market], minute <= closed {
            state.droppedLate += 1
            return
        }
        state.watermark = max(state.watermark, tick.tradeTimestamp)
        let id = TickID(tradeTimestamp: tick.tradeTimestamp, timestamp: tick.timestamp ?? 0, price: tick.tradePrice, volume: tick.tradeVolume)
        // Folded in place: a copy of the open candle would share its tick set with the one in
        // the state, and the insert would then copy the whole set (every tick of the minute).
        // (A repeated tick folds to false and changes nothing; nil: no candle for the minute yet.)
        if state.open[tick.market]?[minute]?.fold(tick, id: id) == nil {
            let c = Candle(
                market: tick.market, minuteStart: minute, open: tick.tradePrice, high: tick.tradePrice, low: tick.tradePrice,
                close: tick.tradePrice, accTradePrice: tick.tradePrice * tick.tradeVolume, accTradeVolume: tick.tradeVolume,
                lastTradeTimestamp: tick.tradeTimestamp, firstTradeTimestamp: tick.tradeTimestamp, tickCount: 1)
            state.open[tick.market, default: [:]][minute] = OpenCandle(candle: c, tickIds: [id])
            state.nextCloseAt = min(state.nextCloseAt, closeTime(minute))
        }
    }

    /// When the watermark closes the candle of `minute`.
    private func closeTime(_ minute: Int64) -> Int64 { minute.saturatingAdd(Self.minute + allowedLatenessMillis) }

    /// Emits every open candle whose minute plus lateness the watermark has passed, oldest first.
    public func closeReady(_ state: inout State) -> [OutputRecord] {
        guard state.watermark >= state.nextCloseAt else { return [] }
        var ready: [Candle] = []
        var next = Int64.max
        for (market, candles) in state.open {
            for (minute, open) in candles {
                let close = closeTime(minute)
                guard close <= state.watermark else {
                    next = min(next, close)
                    continue
                }
                ready.append(open.candle)
                state.open[market]?[minute] = nil
                state.closedThrough[market] = max(state.closedThrough[market] ?? .min, minute)
            }
            if state.open[market]?.isEmpty == true { state.open[market] = nil }
        }
        state.nextCloseAt = next
        ready.sort { ($0.minuteStart, $0.market) < ($1.minuteStart, $1.market) }
        return ready.map { c in
            let minute = String(LocalDateTime.isoUTC(c.minuteStart).prefix(16))
            return OutputRecord(
                output: "prices.candles.1m", key: Array("\(c.market)|\(minute)".utf8), value: c.jsonBytes(),
                dedupeKey: "candle:\(c.market):\(c.minuteStart)")
        }
    }

    private func floorMinute(_ t: Int64) -> Int64 {
        let r = t % Self.minute
        return r >= 0 ? t - r : t - r - Self.minute
    }
}

extension CandleTransform {
    /// `candle-lateness`: how long past its minute a candle waits for late ticks (default 10s).
    public static let options = [
        TransformOption("candle-lateness") { value, options throws(OptionError) in options.candleLatenessMillis = try value.milliseconds() }
    ]
}
