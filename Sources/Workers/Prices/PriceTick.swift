/// One validated Upbit ticker, whatever format it arrived in (WebSocket DEFAULT or SIMPLE, REST).
///
/// Prices are `Double` like the upstream JSON numbers; the decoder rounds each exactly once.
public struct PriceTick: Sendable, Hashable, Codable {
    /// `change`: direction against the previous close.
    public enum Change: String, Sendable, Hashable, Codable { case rise = "RISE", even = "EVEN", fall = "FALL" }
    /// `ask_bid`: which side took the trade.
    public enum Side: String, Sendable, Hashable, Codable { case ask = "ASK", bid = "BID" }
    /// `stream_type`.
    public enum StreamType: String, Sendable, Hashable, Codable { case snapshot = "SNAPSHOT", realtime = "REALTIME" }

    /// `code` (WebSocket) or `market` (REST), e.g. `KRW-BTC`.
    public var market: String
    /// `trade_price` / `tp`: last trade price (positive).
    public var tradePrice: Double
    /// `opening_price` / `op`.
    public var openingPrice: Double?
    /// `high_price` / `hp`.
    public var highPrice: Double?
    /// `low_price` / `lp` (never above `highPrice`).
    public var lowPrice: Double?
    /// `prev_closing_price` / `pcp`.
    public var prevClosingPrice: Double?
    /// `change` / `c`.
    public var change: Change?
    /// `signed_change_price` / `scp`.
    public var signedChangePrice: Double?
    /// Signed ratio: 0.0127 is +1.27 %.
    public var signedChangeRate: Double
    /// `trade_volume` / `tv`: volume of the last trade.
    public var tradeVolume: Double
    /// `acc_trade_volume_24h` / `atv24h`.
    public var accTradeVolume24h: Double?
    /// `acc_trade_price_24h` / `atp24h`.
    public var accTradePrice24h: Double?
    /// Trade time, epoch ms (what candles bucket by).
    public var tradeTimestamp: Int64
    /// Message time, epoch ms.
    public var timestamp: Int64?
    /// `ask_bid` / `ab`.
    public var askBid: Side?
    /// `stream_type` / `st` (absent in REST responses).
    public var streamType: StreamType?
    /// `is_trading_suspended` / `its`.
    public var isTradingSuspended: Bool?

    public init(
        market: String, tradePrice: Double, openingPrice: Double? = nil, highPrice: Double? = nil,
        lowPrice: Double? = nil, prevClosingPrice: Double? = nil, change: Change? = nil,
        signedChangePrice: Double? = nil, signedChangeRate: Double, tradeVolume: Double,
        accTradeVolume24h: Double? = nil, accTradePrice24h: Double? = nil, tradeTimestamp: Int64,
        timestamp: Int64? = nil, askBid: Side? = nil, streamType: StreamType? = nil, isTradingSuspended: Bool? = nil
    ) {
        self.market = market
        self.tradePrice = tradePrice
        self.openingPrice = openingPrice
        self.highPrice = highPrice
        self.lowPrice = lowPrice
        self.prevClosingPrice = prevClosingPrice
        self.change = change
        self.signedChangePrice = signedChangePrice
        self.signedChangeRate = signedChangeRate
        self.tradeVolume = tradeVolume
        self.accTradeVolume24h = accTradeVolume24h
        self.accTradePrice24h = accTradePrice24h
        self.tradeTimestamp = tradeTimestamp
        self.timestamp = timestamp
        self.askBid = askBid
        self.streamType = streamType
        self.isTradingSuspended = isTradingSuspended
    }

    /// The tick as a WebSocket DEFAULT ticker (the normalised form the decode transform produces; the
    /// decoder reads it back unchanged, so transforms can be chained over a topic).
    public func jsonBytes() -> [UInt8] {
        var w = JSONWriter(capacity: 400)
        write(to: &w)
        return w.bytes
    }

    /// Writes ``jsonBytes()`` with `w`.
    /// What ``write(to:)`` writes at most, the market code aside.
    private static var jsonRoom: Int { 723 }

    public func write(to w: inout JSONWriter) {
        // One reservation for the whole tick (the hot path writes one per record): the braces
        // (3), 18 literal keys of 225 bytes with a comma, quotes and colon each (297), 12 numbers
        // (12 x 32), `ticker` and three enum values (33) and a boolean (6) come to 723; the
        // market code on top. `aTickAtItsLongestFitsItsRoom` writes the longest tick there is.
        w.withRoom(Self.jsonRoom &+ JSONWriter.Cursor.room(string: market.utf8.count)) { c in
            c.beginObject()
            c.member(#""type":"#); c.string("ticker" as StaticString)
            c.member(#","code":"#); c.string(market)
            c.member(#","trade_price":"#); c.double(tradePrice)
            if let openingPrice { c.member(#","opening_price":"#); c.double(openingPrice) }
            if let highPrice { c.member(#","high_price":"#); c.double(highPrice) }
            if let lowPrice { c.member(#","low_price":"#); c.double(lowPrice) }
            if let prevClosingPrice { c.member(#","prev_closing_price":"#); c.double(prevClosingPrice) }
            if let change { c.member(#","change":"#); c.string(change.literal) }
            if let signedChangePrice { c.member(#","signed_change_price":"#); c.double(signedChangePrice) }
            c.member(#","signed_change_rate":"#); c.double(signedChangeRate)
            c.member(#","trade_volume":"#); c.double(tradeVolume)
            if let accTradeVolume24h { c.member(#","acc_trade_volume_24h":"#); c.double(accTradeVolume24h) }
            if let accTradePrice24h { c.member(#","acc_trade_price_24h":"#); c.double(accTradePrice24h) }
            c.member(#","trade_timestamp":"#); c.int(tradeTimestamp)
            if let timestamp { c.member(#","timestamp":"#); c.int(timestamp) }
            if let askBid { c.member(#","ask_bid":"#); c.string(askBid.literal) }
            if let streamType { c.member(#","stream_type":"#); c.string(streamType.literal) }
            if let isTradingSuspended { c.member(#","is_trading_suspended":"#); c.bool(isTradingSuspended) }
            c.endObject()
        }
    }
}

// The raw values as literals: written without making a String.
extension PriceTick.Change {
    fileprivate var literal: StaticString {
        switch self {
        case .rise: "RISE"
        case .even: "EVEN"
        case .fall: "FALL"
        }
    }
}

extension PriceTick.Side {
    fileprivate var literal: StaticString {
        switch self {
        case .ask: "ASK"
        case .bid: "BID"
        }
    }
}

extension PriceTick.StreamType {
    fileprivate var literal: StaticString {
        switch self {
        case .snapshot: "SNAPSHOT"
        case .realtime: "REALTIME"
        }
    }
}
