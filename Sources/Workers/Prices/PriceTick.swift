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

    /// The tick as a WebSocket DEFAULT ticker (the normalised form the decode stage produces; the
    /// decoder reads it back unchanged, so stages can be chained over a topic).
    public func jsonBytes() -> [UInt8] {
        var w = JSONWriter(capacity: 400)
        write(to: &w)
        return w.bytes
    }

    /// Writes ``jsonBytes()`` with `w`.
    public func write(to w: inout JSONWriter) {
        w.beginObject()
        w.key("type"); w.string("ticker")
        w.key("code"); w.string(market)
        w.key("trade_price"); w.double(tradePrice)
        if let openingPrice { w.key("opening_price"); w.double(openingPrice) }
        if let highPrice { w.key("high_price"); w.double(highPrice) }
        if let lowPrice { w.key("low_price"); w.double(lowPrice) }
        if let prevClosingPrice { w.key("prev_closing_price"); w.double(prevClosingPrice) }
        if let change { w.key("change"); w.string(change.rawValue) }
        if let signedChangePrice { w.key("signed_change_price"); w.double(signedChangePrice) }
        w.key("signed_change_rate"); w.double(signedChangeRate)
        w.key("trade_volume"); w.double(tradeVolume)
        if let accTradeVolume24h { w.key("acc_trade_volume_24h"); w.double(accTradeVolume24h) }
        if let accTradePrice24h { w.key("acc_trade_price_24h"); w.double(accTradePrice24h) }
        w.key("trade_timestamp"); w.int(tradeTimestamp)
        if let timestamp { w.key("timestamp"); w.int(timestamp) }
        if let askBid { w.key("ask_bid"); w.string(askBid.rawValue) }
        if let streamType { w.key("stream_type"); w.string(streamType.rawValue) }
        if let isTradingSuspended { w.key("is_trading_suspended"); w.bool(isTradingSuspended) }
        w.endObject()
    }
}
