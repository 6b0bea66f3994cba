/// Decodes Upbit tickers: WebSocket DEFAULT (snake_case) and SIMPLE (short keys) frames, alone
/// or wrapped in an array (SIMPLE_LIST / JSON_LIST), and the REST ticker array (keyed by
/// `market`). Unknown and deprecated keys (`trade_status`, `market_state_for_ios`, …) are
/// skipped; `null` is accepted for every optional field.
///
/// Validation: `code`/`market`, `trade_price`, `signed_change_rate`, `trade_volume` and
/// `trade_timestamp` are required; prices and volumes are not negative (`trade_price` positive);
/// `type`, if present, is `ticker`; `change`, `ask_bid` and `stream_type` are known values;
/// the market code looks like `KRW-BTC`.
public struct PriceTickDecoder: Sendable {
    public var limits: DecodeLimits

    public init(limits: DecodeLimits = .default) { self.limits = limits }

    /// All ticks in one message (one for a single frame, several for a list). The first bad
    /// element fails the whole message: its path (`[2].trade_price`) says which.
    public func decode(_ bytes: [UInt8]) throws(DecodeFailure) -> [PriceTick] { try decode(bytes[...]) }

    /// ``decode(_:)-([UInt8])`` over a slice (a consumed record's value).
    public func decode(_ bytes: ArraySlice<UInt8>) throws(DecodeFailure) -> [PriceTick] {
        var ticks: [PriceTick] = []
        try decode(bytes) { ticks.append($0) }
        return ticks
    }

    /// Streams the ticks of one message to `body` without collecting them (the hot path).
    public func decode(_ bytes: ArraySlice<UInt8>, _ body: (PriceTick) -> Void) throws(DecodeFailure) {
        var marketKeys = 0
        try decode(bytes, marketKeys: &marketKeys, body)
    }

    /// Validates one message as ``decode(_:_:)`` does, and returns its market when the message
    /// is one ticker that names it once (one `code`, `market` or `cd` key): that is then the
    /// message's entity key as `UpstreamStream.entityKey(of:)` reads it (the first of `code`,
    /// `market`, `cd` holding a non-empty string), so that the ingest endpoint reads each record
    /// once. nil for a list of tickers or a market named more than once (read the key the
    /// general way).
    public func validate(readingMarket bytes: ArraySlice<UInt8>) throws(DecodeFailure) -> String? {
        var marketKeys = 0
        var market: String?
        var ticks = 0
        try decode(bytes, marketKeys: &marketKeys) { tick in
            market = tick.market
            ticks += 1
        }
        // A list of one ticker is still a list: it has no entity key of its own.
        let isObject = bytes.first { $0 != 0x20 && $0 != 0x0A && $0 != 0x0D && $0 != 0x09 } == UInt8(ascii: "{")
        return isObject && ticks == 1 && marketKeys == 1 ? market : nil
    }

    /// `marketKeys`: how many `code`, `market` and `cd` keys the message had (all objects).
    private func decode(_ bytes: ArraySlice<UInt8>, marketKeys: inout Int, _ body: (PriceTick) -> Void) throws(DecodeFailure) {
        try JSONScanner.withScanner(bytes, limits: limits) { s throws(DecodeFailure) in
            if try s.peek() == UInt8(ascii: "[") {
                try s.beginArray()
                var first = true
                var index = 0
                while try s.nextElement(&first) {
                    guard index < s.limits.maxArrayElements else { throw s.tooManyElements().under("$") }
                    do throws(DecodeFailure) {
                        body(try Self.decodeObject(&s, marketKeys: &marketKeys))
                    } catch {
                        throw error.under("[\(index)]")
                    }
                    index += 1
                }
                if index == 0 { throw DecodeFailure(field: "$", reason: .emptyValue, detail: "empty ticker array") }
            } else {
                body(try Self.decodeObject(&s, marketKeys: &marketKeys))
            }
        }
    }

    private enum Field: Int {
        case type, market, openingPrice, highPrice, lowPrice, tradePrice, prevClosingPrice, change
        case signedChangePrice, signedChangeRate, tradeVolume, accTradeVolume24h, accTradePrice24h
        case tradeTimestamp, timestamp, askBid, streamType, isTradingSuspended

        /// `Field(rawValue:)` without its call (a switch the optimiser kept out of line, once per
        /// key): the raw values are the cases' order, 0 up, which is how a case is stored.
        @inline(__always)
        static func of(_ id: Int) -> Field? {
            guard id >= 0, id <= Field.isTradingSuspended.rawValue else { return nil }
            let field = unsafeBitCast(UInt8(truncatingIfNeeded: id), to: Field.self)
            assert(field == Field(rawValue: id), "Field.of(\(id))")
            return field
        }
    }

    /// DEFAULT (with REST's `market`) and SIMPLE names, each in the order Upbit sends them (the
    /// order the scanner expects; any order decodes), with the keys it sends that no field reads
    /// listed as ignored, so that each key of a frame is one comparison.
    private static let keys: KeyTable = {
        let ignored = KeyTable.ignored
        return KeyTable(schemes: [
            [
                ("type", Field.type.rawValue), ("code", Field.market.rawValue), ("market", Field.market.rawValue),
                ("opening_price", Field.openingPrice.rawValue), ("high_price", Field.highPrice.rawValue),
                ("low_price", Field.lowPrice.rawValue), ("trade_price", Field.tradePrice.rawValue),
                ("prev_closing_price", Field.prevClosingPrice.rawValue), ("change", Field.change.rawValue),
                ("change_price", ignored), ("change_rate", ignored),
                ("signed_change_price", Field.signedChangePrice.rawValue), ("signed_change_rate", Field.signedChangeRate.rawValue),
                ("trade_volume", Field.tradeVolume.rawValue), ("acc_trade_volume", ignored),
                ("acc_trade_volume_24h", Field.accTradeVolume24h.rawValue), ("acc_trade_price", ignored),
                ("acc_trade_price_24h", Field.accTradePrice24h.rawValue), ("trade_date", ignored), ("trade_time", ignored),
                ("trade_timestamp", Field.tradeTimestamp.rawValue), ("ask_bid", Field.askBid.rawValue),
                ("acc_ask_volume", ignored), ("acc_bid_volume", ignored), ("highest_52_week_price", ignored),
                ("highest_52_week_date", ignored), ("lowest_52_week_price", ignored), ("lowest_52_week_date", ignored),
                ("market_state", ignored), ("is_trading_suspended", Field.isTradingSuspended.rawValue),
                ("delisting_date", ignored), ("market_warning", ignored),
                ("timestamp", Field.timestamp.rawValue), ("stream_type", Field.streamType.rawValue),
            ],
            [
                ("ty", Field.type.rawValue), ("cd", Field.market.rawValue), ("op", Field.openingPrice.rawValue),
                ("hp", Field.highPrice.rawValue), ("lp", Field.lowPrice.rawValue), ("tp", Field.tradePrice.rawValue),
                ("pcp", Field.prevClosingPrice.rawValue), ("c", Field.change.rawValue), ("cp", ignored), ("cr", ignored),
                ("scp", Field.signedChangePrice.rawValue), ("scr", Field.signedChangeRate.rawValue),
                ("tv", Field.tradeVolume.rawValue), ("atv", ignored), ("atv24h", Field.accTradeVolume24h.rawValue),
                ("atp", ignored), ("atp24h", Field.accTradePrice24h.rawValue), ("tdt", ignored), ("ttm", ignored),
                ("ttms", Field.tradeTimestamp.rawValue), ("ab", Field.askBid.rawValue), ("aav", ignored), ("abv", ignored),
                ("h52wp", ignored), ("h52wdt", ignored), ("l52wp", ignored), ("l52wdt", ignored), ("ms", ignored),
                ("its", Field.isTradingSuspended.rawValue), ("dd", ignored), ("mw", ignored),
                ("tms", Field.timestamp.rawValue), ("st", Field.streamType.rawValue),
            ],
        ])
    }()

    @inline(__always)
    private static func decodeObject(_ s: inout JSONScanner, marketKeys: inout Int) throws(DecodeFailure) -> PriceTick {
        try s.beginObject()
        var market: String?
        var tradePrice: Double?
        var openingPrice: Double?
        var highPrice: Double?
        var lowPrice: Double?
        var prevClosingPrice: Double?
        var change: PriceTick.Change?
        var signedChangePrice: Double?
        var signedChangeRate: Double?
        var tradeVolume: Double?
        var accTradeVolume24h: Double?
        var accTradePrice24h: Double?
        var tradeTimestamp: Int64?
        var timestamp: Int64?
        var askBid: PriceTick.Side?
        var streamType: PriceTick.StreamType?
        var isTradingSuspended: Bool?

        // Read once: each use of a static goes through its lazy initialisation check (swift_once).
        let keys = Self.keys
        var expected = keys.firstExpected
        var first = true
        while let key = try s.nextKey(&first, in: keys, expected: &expected) {
            do throws(DecodeFailure) {
                guard let field = Field.of(key.field) else {
                    try s.skipValue()
                    continue
                }
                switch field {
                case .type:
                    if try s.consumeNull() { break }
                    let span = try s.readStringSpan()
                    guard s.spanEquals(span, "ticker") else {
                        throw DecodeFailure(field: "", reason: .invalidValue, detail: "not a ticker: \(s.keyName(span))")
                    }
                case .market:
                    market = try s.readOptionalString()
                    marketKeys &+= 1
                case .tradePrice: tradePrice = try s.readNonNegative()
                case .openingPrice: openingPrice = try s.readNonNegative()
                case .highPrice: highPrice = try s.readNonNegative()
                case .lowPrice: lowPrice = try s.readNonNegative()
                case .prevClosingPrice: prevClosingPrice = try s.readNonNegative()
                case .change:
                    if try s.consumeNull() { break }
                    let span = try s.readStringSpan()
                    if s.spanEquals(span, "RISE") { change = .rise }
                    else if s.spanEquals(span, "FALL") { change = .fall }
                    else if s.spanEquals(span, "EVEN") { change = .even }
                    else { throw DecodeFailure(field: "", reason: .invalidValue, detail: "expected RISE, EVEN or FALL") }
                case .signedChangePrice: signedChangePrice = try s.readOptionalDouble()
                case .signedChangeRate: signedChangeRate = try s.readOptionalDouble()
                case .tradeVolume: tradeVolume = try s.readNonNegative()
                case .accTradeVolume24h: accTradeVolume24h = try s.readNonNegative()
                case .accTradePrice24h: accTradePrice24h = try s.readNonNegative()
                case .tradeTimestamp: tradeTimestamp = try s.readOptionalInt()
                case .timestamp: timestamp = try s.readOptionalInt()
                case .askBid:
                    if try s.consumeNull() { break }
                    let span = try s.readStringSpan()
                    if s.spanEquals(span, "ASK") { askBid = .ask }
                    else if s.spanEquals(span, "BID") { askBid = .bid }
                    else { throw DecodeFailure(field: "", reason: .invalidValue, detail: "expected ASK or BID") }
                case .streamType:
                    if try s.consumeNull() { break }
                    let span = try s.readStringSpan()
                    if s.spanEquals(span, "REALTIME") { streamType = .realtime }
                    else if s.spanEquals(span, "SNAPSHOT") { streamType = .snapshot }
                    else { throw DecodeFailure(field: "", reason: .invalidValue, detail: "expected SNAPSHOT or REALTIME") }
                case .isTradingSuspended: isTradingSuspended = try s.readOptionalBool()
                }
            } catch {
                throw error.under(s.keyName(key))
            }
        }

        guard let market else { throw missing("code") }
        var code = market  // a small string: its bytes are copied to the stack, not allocated
        guard code.withUTF8(Self.isMarketCode) else { throw invalid("code", "not a market code like KRW-BTC: \(market.prefix(40))") }
        guard let tradePrice else { throw missing("trade_price") }
        guard tradePrice > 0 else { throw invalid("trade_price", "must be positive") }
        guard let signedChangeRate else { throw missing("signed_change_rate") }
        guard let tradeVolume else { throw missing("trade_volume") }
        guard let tradeTimestamp else { throw missing("trade_timestamp") }
        guard tradeTimestamp > 0, tradeTimestamp < Self.year10000 else {
            throw invalid("trade_timestamp", "must be an epoch-ms time between 1970 and 9999, got \(tradeTimestamp)")
        }
        if let timestamp, timestamp <= 0 || timestamp >= Self.year10000 {
            throw invalid("timestamp", "must be an epoch-ms time between 1970 and 9999, got \(timestamp)")
        }
        if let lowPrice, let highPrice, lowPrice > highPrice {
            throw invalid("low_price", "low_price \(lowPrice) above high_price \(highPrice)")
        }
        return PriceTick(
            market: market, tradePrice: tradePrice, openingPrice: openingPrice, highPrice: highPrice,
            lowPrice: lowPrice, prevClosingPrice: prevClosingPrice, change: change,
            signedChangePrice: signedChangePrice, signedChangeRate: signedChangeRate, tradeVolume: tradeVolume,
            accTradeVolume24h: accTradeVolume24h, accTradePrice24h: accTradePrice24h, tradeTimestamp: tradeTimestamp,
            timestamp: timestamp, askBid: askBid, streamType: streamType, isTradingSuspended: isTradingSuspended)
    }

    /// 10000-01-01T00:00:00Z in epoch ms: later times are not trade times (and would overflow minute arithmetic).
    static let year10000: Int64 = 253_402_300_800_000

    /// `QUOTE-BASE`: uppercase letters and digits on both sides of one dash, at most 32 bytes.
    private static func isMarketCode(_ utf8: UnsafeBufferPointer<UInt8>) -> Bool {
        var dashes = 0
        var count = 0
        var lastWasDash = true
        for b in utf8 {
            count += 1
            if b == UInt8(ascii: "-") {
                if lastWasDash { return false }
                dashes += 1
                lastWasDash = true
            } else if (b >= UInt8(ascii: "A") && b <= UInt8(ascii: "Z")) || (b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9")) {
                lastWasDash = false
            } else {
                return false
            }
        }
        return dashes == 1 && !lastWasDash && count <= 32
    }
}
