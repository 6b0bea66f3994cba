import Workers

/// Upstream samples written for these tests after the public API docs (see formats.md).
enum Fixtures {
    /// WebSocket DEFAULT ticker with every documented field (947-ish bytes, like the benchmark's).
    static let upbitDefault = """
        {"type":"ticker","code":"KRW-BTC","opening_price":31883000,"high_price":32310000.00000000,\
        "low_price":31855000,"trade_price":32287000.0,"prev_closing_price":31883000.00000000,"change":"RISE",\
        "change_price":404000.00000000,"change_rate":0.0126713295,"signed_change_price":404000.00000000,\
        "signed_change_rate":0.0126713295,"trade_volume":8.4e-05,"acc_trade_volume":2117.53740907,\
        "acc_trade_volume_24h":4185.14891452,"acc_trade_price":67830394829.465390000000,\
        "acc_trade_price_24h":134056539620.4656,"trade_date":"20231114","trade_time":"031206",\
        "trade_timestamp":1699931526014,"ask_bid":"BID","acc_ask_volume":1141.35218542,\
        "acc_bid_volume":976.18522365,"highest_52_week_price":41569000.00000000,"highest_52_week_date":"2023-06-23",\
        "lowest_52_week_price":20700000.00000000,"lowest_52_week_date":"2022-12-30","market_state":"ACTIVE",\
        "is_trading_suspended":false,"delisting_date":null,"market_warning":"NONE","timestamp":1699931526047,\
        "stream_type":"REALTIME"}
        """

    static let upbitSimple = """
        {"ty":"ticker","cd":"KRW-XRP","op":815.0,"hp":820,"lp":810.0,"tp":812.0,"pcp":815,"c":"FALL",\
        "cp":3.0,"cr":0.0036809816,"scp":-3.0,"scr":-0.0036809816,"tv":1.5e+03,"atv":1000.5,\
        "atv24h":2000.25,"atp":812000.0,"atp24h":1624000.00000000,"tdt":"20231114","ttm":"031206",\
        "ttms":1700000000123,"ab":"ASK","aav":10,"abv":20,"h52wp":1000,"h52wdt":"2023-01-01","l52wp":500,\
        "l52wdt":"2023-02-02","ms":"ACTIVE","its":false,"dd":null,"mw":"NONE","tms":1700000000150,"st":"SNAPSHOT"}
        """

    /// REST ticker: an array keyed by `market`, with the KST date fields and deprecated fields.
    static let upbitREST = """
        [{"market":"KRW-BTC","trade_date":"20231114","trade_time":"031206","trade_date_kst":"20231114",\
        "trade_time_kst":"121206","trade_timestamp":1699931526014,"opening_price":31883000,\
        "high_price":32310000,"low_price":31855000,"trade_price":32287000,"prev_closing_price":31883000.0,\
        "change":"RISE","change_price":404000,"change_rate":0.0126713295,"signed_change_price":404000,\
        "signed_change_rate":0.0126713295,"trade_volume":0.00008400,"acc_trade_price":67830394829.46539,\
        "acc_trade_price_24h":134056539620.4656,"acc_trade_volume":2117.53740907,\
        "acc_trade_volume_24h":4185.14891452,"highest_52_week_price":41569000,"highest_52_week_date":"2023-06-23",\
        "lowest_52_week_price":20700000,"lowest_52_week_date":"2022-12-30","timestamp":1699931526047,\
        "trade_status":null,"market_state":"ACTIVE","market_state_for_ios":null,"is_trading_suspended":false,\
        "delisting_date":null,"market_warning":"NONE"},\
        {"market":"KRW-ETH","trade_timestamp":1699931526100,"trade_price":2.6e6,"signed_change_rate":-0.001,\
        "trade_volume":1.0,"change":"FALL","timestamp":1699931526200}]
        """

    /// Old era: snake_case page.
    static let productPageOld = """
        {"page_no":1,"items_per_page":2,"total_count":2,"offset":0,"limit":2,"last_page":1,"has_next":false,"has_prev":false,\
        "pages":[{"id":15,"vendor_id":3,"name":"MacBook Pro","thumbnail":"https://img.example.com/p/15/thumb",\
        "currency":"KRW","price":1690000,"bargain_price":1690000,"discounted_price":0,"stock":5,\
        "created_at":"2022-01-04T00:00:00.00","issued_at":"2022-01-04T00:00:00.00"},\
        {"id":16,"vendor_id":3,"name":"Pen","thumbnail":"https://img.example.com/p/16.png","currency":"USD",\
        "price":1.23123123E8,"bargain_price":123123023.0,"discounted_price":100.0,"stock":0,\
        "created_at":"2022-01-05T10:30:00.00","issued_at":"2022-01-06T00:00:00.00"}]}
        """

    /// New era: camelCase page wrapper, `vendorName` inside snake_case products.
    static let productPageNew = """
        {"pageNo":1,"itemsPerPage":20,"totalCount":1,"offset":0,"limit":20,"lastPage":1,"hasNext":false,"hasPrev":false,\
        "pages":[{"id":2012,"vendor_id":29,"vendorName":"wongbing","name":"Apple Watch","description":"detail",\
        "thumbnail":"https://s3.example.com/training-resources/2022/10/18/abc","currency":"KRW","price":2000.0,\
        "bargain_price":1500,"discounted_price":500,"stock":10,"created_at":"2022-10-18T00:00:00",\
        "issued_at":"2022-10-18T00:00:00"}]}
        """

    /// Detail response: images and vendors object.
    static let productDetail = """
        {"id":522,"vendor_id":6,"name":"Keyboard","description":"mechanical","thumbnail":"https://img.example.com/t/522",\
        "currency":"KRW","price":50000,"bargain_price":45000,"discounted_price":5000,"stock":3,\
        "images":[{"id":1,"url":"https://img.example.com/o/1.jpg","thumbnail_url":"https://img.example.com/t/1.jpg",\
        "succeed":true,"issued_at":"2022-01-04T00:00:00.00"},{"id":2,"url":"https://img.example.com/o/2",\
        "thumbnail_url":"https://img.example.com/t/2","issued_at":"2022-01-04T00:00:00.00"}],\
        "vendors":{"id":6,"name":"keyboard-shop","created_at":"2021-12-01T00:00:00.00"},\
        "created_at":"2022-01-04T00:00:00.00","issued_at":"2022-01-05T00:00:00.00"}
        """

    static func campaign(
        id: Int = 101, status: String = "START", ratio: Int = 42, end: String = "2023-12-31T23:59:59",
        organizations: String = "[]", categoryId: Int = 2, my: String = "null"
    ) -> String {
        """
        {"id":\(id),"name":"Walk for puppies \(id)","status":"\(status)","ratio":\(ratio),"donatedSteps":4200000,\
        "goalPoint":10000000,"participantCount":1234,"startDate":"2023-11-01T00:00:00","endDate":"\(end)",\
        "remainedDaysToEnd":39,"categoryId":\(categoryId),"organizations":\(organizations),\
        "campaignPromoter":{"name":"Bigwalk","id":7},"my":\(my),\
        "smallListThumbnailImagePath":"https://img.example.com/c/s","mediumListThumbnailImagePath":null,\
        "largeListThumbnailImagePath":null,"detailThumbnailImagePath":"https://img.example.com/c/d",\
        "beneficiary":"Animal shelter","event":null,"service":null,"enabled":true,"serviceOnTime":true,\
        "formattedStartDate":"2023.11.01 12:00","formattedEndDate":"2023.12.31 11:59"}
        """
    }

    static func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }
}

/// Runs a decoder and returns the failure it must produce (a test failure if it succeeds).
func expectFailure<T>(_ body: () throws(DecodeFailure) -> T) -> DecodeFailure? {
    do {
        _ = try body()
        return nil
    } catch {
        return error
    }
}
