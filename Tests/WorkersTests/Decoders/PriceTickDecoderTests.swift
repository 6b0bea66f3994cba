import Testing
import Workers

@Suite struct PriceTickDecoderTests {
    let decoder = PriceTickDecoder()

    @Test func decodesDefaultFormatWithPaddedAndExponentNumbers() throws {
        let ticks = try decoder.decode(Fixtures.bytes(Fixtures.upbitDefault))
        #expect(ticks == [
            PriceTick(
                market: "KRW-BTC", tradePrice: 32_287_000, openingPrice: 31_883_000, highPrice: 32_310_000,
                lowPrice: 31_855_000, prevClosingPrice: 31_883_000, change: .rise, signedChangePrice: 404_000,
                signedChangeRate: 0.0126713295, tradeVolume: 0.000084, accTradeVolume24h: 4185.14891452,
                accTradePrice24h: 134_056_539_620.4656, tradeTimestamp: 1_699_931_526_014, timestamp: 1_699_931_526_047,
                askBid: .bid, streamType: .realtime, isTradingSuspended: false)
        ])
    }

    @Test func simpleFormatGivesTheSameFieldsUnderShortKeys() throws {
        let tick = try #require(try decoder.decode(Fixtures.bytes(Fixtures.upbitSimple)).first)
        #expect(tick.market == "KRW-XRP")
        #expect(tick.tradePrice == 812)
        #expect(tick.change == .fall)
        #expect(tick.signedChangeRate == -0.0036809816)
        #expect(tick.tradeVolume == 1500)
        #expect(tick.accTradePrice24h == 1_624_000)
        #expect(tick.tradeTimestamp == 1_700_000_000_123)
        #expect(tick.askBid == .ask)
        #expect(tick.streamType == .snapshot)
    }

    @Test func simpleListAndJSONListAreArraysOfFrames() throws {
        let list = "[\(Fixtures.upbitSimple),\(Fixtures.upbitDefault)]"
        let ticks = try decoder.decode(Fixtures.bytes(list))
        #expect(ticks.map(\.market) == ["KRW-XRP", "KRW-BTC"])
    }

    @Test func restArrayIsKeyedByMarketAndIgnoresDeprecatedFields() throws {
        let ticks = try decoder.decode(Fixtures.bytes(Fixtures.upbitREST))
        #expect(ticks.map(\.market) == ["KRW-BTC", "KRW-ETH"])
        #expect(ticks[0].tradeVolume == 0.000084)
        #expect(ticks[0].accTradeVolume24h == 4185.14891452)
        #expect(ticks[1].tradePrice == 2_600_000)
        #expect(ticks[1].streamType == nil)
    }

    @Test func normalisedOutputReadsBackUnchanged() throws {
        for sample in [Fixtures.upbitDefault, Fixtures.upbitSimple, Fixtures.upbitREST] {
            for tick in try decoder.decode(Fixtures.bytes(sample)) {
                #expect(try decoder.decode(tick.jsonBytes()) == [tick])
            }
        }
    }

    @Test func binaryFrameWithByteOrderMarkDecodes() throws {
        let frame: [UInt8] = [0xEF, 0xBB, 0xBF] + Fixtures.bytes(Fixtures.upbitDefault)
        #expect(try decoder.decode(frame).first?.market == "KRW-BTC")
    }

    @Test func escapedKeysAndWhitespaceAreFine() throws {
        let text = " {\n \"\\u0063ode\" : \"KRW-BTC\" ,\"trade_price\":1,\"signed_change_rate\":0,\"trade_volume\":0,\"trade_timestamp\":1}\t\r\n"
        #expect(try decoder.decode(Fixtures.bytes(text)).first?.market == "KRW-BTC")
    }

    @Test(arguments: [
        (#"{"code":"KRW-BTC","trade_price":-1,"signed_change_rate":0,"trade_volume":0,"trade_timestamp":1}"#, "trade_price", DecodeFailure.Reason.invalidValue),
        (#"{"code":"KRW-BTC","trade_price":"1","signed_change_rate":0,"trade_volume":0,"trade_timestamp":1}"#, "trade_price", .wrongType),
        (#"{"trade_price":1,"signed_change_rate":0,"trade_volume":0,"trade_timestamp":1}"#, "code", .missingField),
        (#"{"code":null,"trade_price":1,"signed_change_rate":0,"trade_volume":0,"trade_timestamp":1}"#, "code", .missingField),
        (#"{"code":"KRW-BTC","signed_change_rate":0,"trade_volume":0,"trade_timestamp":1}"#, "trade_price", .missingField),
        (#"{"code":"KRW-BTC","trade_price":1,"signed_change_rate":0,"trade_volume":0}"#, "trade_timestamp", .missingField),
        (#"{"code":"KRW-BTC","trade_price":1,"signed_change_rate":0,"trade_volume":0,"trade_timestamp":1.5}"#, "trade_timestamp", .wrongType),
        (#"{"code":"KRW-BTC","trade_price":1,"signed_change_rate":0,"trade_volume":-2,"trade_timestamp":1}"#, "trade_volume", .invalidValue),
        (#"{"code":"KRW-BTC","trade_price":1,"change":"UP","signed_change_rate":0,"trade_volume":0,"trade_timestamp":1}"#, "change", .invalidValue),
        (#"{"type":"orderbook","code":"KRW-BTC","trade_price":1,"signed_change_rate":0,"trade_volume":0,"trade_timestamp":1}"#, "type", .invalidValue),
        (#"{"code":"btc","trade_price":1,"signed_change_rate":0,"trade_volume":0,"trade_timestamp":1}"#, "code", .invalidValue),
        (#"{"code":"KRW-BTC","trade_price":1,"signed_change_rate":0,"trade_volume":0,"trade_timestamp":1,"low_price":5,"high_price":4}"#, "low_price", .invalidValue),
        (#"[{"code":"KRW-BTC","trade_price":1,"signed_change_rate":0,"trade_volume":0,"trade_timestamp":1},{"code":"KRW-BTC","trade_price":true}]"#, "[1].trade_price", .wrongType),
        (#"{"code":"KRW-BTC","trade_price":1,"signed_change_rate":0,"trade_volume":0,"trade_timestamp":1"#, "$", .malformedJSON),
        (#"{"code":"KRW-BTC","trade_price":1,"unknown":[1,2,}"#, "unknown", .malformedJSON),
        (#"{"code":"KRW-BTC","trade_price":1,"signed_change_rate":0,"trade_volume":0,"trade_timestamp":1} x"#, "$", .malformedJSON),
        ("[]", "$", .emptyValue),
        ("", "$", .emptyValue),
        ("\"ticker\"", "$", .wrongType),
    ])
    func failuresNameTheFieldAndReason(_ input: String, _ field: String, _ reason: DecodeFailure.Reason) {
        let failure = expectFailure { () throws(DecodeFailure) in try decoder.decode(Fixtures.bytes(input)) }
        #expect(failure?.field == field, "\(String(describing: failure))")
        #expect(failure?.reason == reason, "\(String(describing: failure))")
    }

    @Test func sizeAndDepthAreBounded() {
        let deep = #"{"a":"# + String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000) + "}"
        let tooDeep = expectFailure { () throws(DecodeFailure) in try decoder.decode(Fixtures.bytes(deep)) }
        #expect(tooDeep?.reason == .tooDeep)

        let nestedUnknown = #"{"x":"# + String(repeating: "{\"a\":", count: 100) + "1" + String(repeating: "}", count: 100) + "}"
        #expect(expectFailure { () throws(DecodeFailure) in try decoder.decode(Fixtures.bytes(nestedUnknown)) }?.reason == .tooDeep)

        let small = PriceTickDecoder(limits: DecodeLimits(maxBytes: 100))
        let tooBig = expectFailure { () throws(DecodeFailure) in try small.decode(Fixtures.bytes(Fixtures.upbitDefault)) }
        #expect(tooBig?.reason == .tooLarge)

        let fewElements = PriceTickDecoder(limits: DecodeLimits(maxArrayElements: 1))
        let list = "[\(Fixtures.upbitSimple),\(Fixtures.upbitSimple)]"
        #expect(expectFailure { () throws(DecodeFailure) in try fewElements.decode(Fixtures.bytes(list)) }?.reason == .tooLarge)
    }
}
