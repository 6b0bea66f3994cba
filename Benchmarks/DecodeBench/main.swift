// decode-bench: decode + validate throughput of the Workers decoders, one stream at a time.
//
//   decode-bench generate DIR [COUNT]   writes DIR/<stream>.jsonl (COUNT messages each, default 20000)
//   decode-bench run DIR [SECONDS [STREAM]]
//                                       decodes every message of each file (or only STREAM's) repeatedly for about
//                                       SECONDS (default 2) per repetition, 5 repetitions,
//                                       prints one tab-separated line per stream with the best:
//                                       stream  messages  bytes  msgs/s  MB/s  failures
//
// scripts/bench-decode runs this and Benchmarks/DecodeBench/peer_pydantic.py on the same files,
// pinned to one core. Inputs are generated deterministically (fixed seed) so runs are comparable.
import Foundation
import Workers

struct SplitMix {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func int(_ range: ClosedRange<Int>) -> Int {
        range.lowerBound + Int(next() % UInt64(range.upperBound - range.lowerBound + 1))
    }
    /// A decimal with `frac` fraction digits, as upstream writes them (optionally zero-padded).
    mutating func decimal(_ intPart: ClosedRange<Int>, frac: Int, pad: Bool = false) -> String {
        var s = String(int(intPart))
        if frac > 0 {
            s += "."
            for _ in 0..<frac { s += String(next() % 10) }
            if pad { s += "000000" }
        }
        return s
    }
}

let markets = ["KRW-BTC", "KRW-ETH", "KRW-XRP", "KRW-SOL", "KRW-DOGE", "BTC-ETH", "USDT-BTC", "KRW-ADA"]

/// WebSocket DEFAULT ticker with every documented field (about 950 bytes, like the issue's reference).
func tickerDefault(_ r: inout SplitMix) -> String {
    let price = r.int(10_000...90_000_000)
    let ts = 1_699_931_526_014 + r.int(0...86_400_000)
    let change = ["RISE", "EVEN", "FALL"][r.int(0...2)]
    return """
        {"type":"ticker","code":"\(markets[r.int(0...7)])","opening_price":\(price - 1000),"high_price":\(price + 5000).00000000,\
        "low_price":\(price - 5000),"trade_price":\(price).0,"prev_closing_price":\(price - 1000).00000000,"change":"\(change)",\
        "change_price":1000.00000000,"change_rate":0.\(r.int(1000000...9999999)),"signed_change_price":1000.00000000,\
        "signed_change_rate":\(r.int(0...1) == 0 ? "-" : "")0.\(r.int(1000000...9999999)),"trade_volume":\(r.int(1...9)).\(r.int(1...9))e-0\(r.int(1...5)),\
        "acc_trade_volume":\(r.decimal(1...9999, frac: 8)),"acc_trade_volume_24h":\(r.decimal(1...9999, frac: 8)),\
        "acc_trade_price":\(r.decimal(1...99_999_999_999, frac: 6, pad: true)),"acc_trade_price_24h":\(r.decimal(1...999_999_999_999, frac: 4)),\
        "trade_date":"20231114","trade_time":"031206","trade_timestamp":\(ts),"ask_bid":"\(r.int(0...1) == 0 ? "ASK" : "BID")",\
        "acc_ask_volume":\(r.decimal(1...9999, frac: 8)),"acc_bid_volume":\(r.decimal(1...9999, frac: 8)),\
        "highest_52_week_price":\(price * 2).00000000,"highest_52_week_date":"2023-06-23",\
        "lowest_52_week_price":\(price / 2).00000000,"lowest_52_week_date":"2022-12-30","market_state":"ACTIVE",\
        "is_trading_suspended":false,"delisting_date":null,"market_warning":"NONE","timestamp":\(ts + 33),\
        "stream_type":"REALTIME"}
        """
}

/// WebSocket SIMPLE ticker (short keys).
func tickerSimple(_ r: inout SplitMix) -> String {
    let price = r.int(10_000...90_000_000)
    let ts = 1_699_931_526_014 + r.int(0...86_400_000)
    return """
        {"ty":"ticker","cd":"\(markets[r.int(0...7)])","op":\(price - 1000),"hp":\(price + 5000).0,"lp":\(price - 5000),\
        "tp":\(price).0,"pcp":\(price - 1000),"c":"FALL","cp":1000.0,"cr":0.\(r.int(100000...999999)),"scp":-1000.0,\
        "scr":-0.\(r.int(100000...999999)),"tv":\(r.decimal(0...99, frac: 8)),"atv":\(r.decimal(1...9999, frac: 8)),\
        "atv24h":\(r.decimal(1...9999, frac: 8)),"atp":\(r.decimal(1...99_999_999, frac: 4)),"atp24h":\(r.decimal(1...99_999_999, frac: 8, pad: true)),\
        "tdt":"20231114","ttm":"031206","ttms":\(ts),"ab":"ASK","aav":\(r.decimal(1...999, frac: 3)),"abv":\(r.decimal(1...999, frac: 3)),\
        "h52wp":\(price * 2),"h52wdt":"2023-01-01","l52wp":\(price / 2),"l52wdt":"2023-02-02","ms":"ACTIVE","its":false,\
        "dd":null,"mw":"NONE","tms":\(ts + 30),"st":"REALTIME"}
        """
}

/// Open-market product detail (new era: vendorName + images + vendors).
func productDetail(_ r: inout SplitMix) -> String {
    let id = r.int(1...1_000_000)
    let price = r.int(1000...2_000_000)
    let discount = r.int(0...999)
    let images = (0..<r.int(1...5)).map { i in
        #"{"id":\#(id * 10 + i),"url":"https://s3.example.com/training-resources/2022/10/18/\#(r.next() % 1_000_000)_origin","thumbnail_url":"https://s3.example.com/training-resources/2022/10/18/\#(r.next() % 1_000_000)_thumb","issued_at":"2022-10-18T00:00:00"}"#
    }.joined(separator: ",")
    return """
        {"id":\(id),"vendor_id":\(r.int(1...500)),"vendorName":"vendor\(r.int(1...500))","name":"Product \(id) 상품",\
        "description":"Lorem ipsum dolor sit amet \(r.next())","thumbnail":"https://s3.example.com/training-resources/2022/10/18/\(r.next() % 1_000_000)",\
        "currency":"\(r.int(0...1) == 0 ? "KRW" : "USD")","price":\(price).0,"bargain_price":\(price - discount).0,\
        "discounted_price":\(discount).0,"stock":\(r.int(0...999)),"images":[\(images)],\
        "vendors":{"id":\(r.int(1...500)),"name":"shop","created_at":"2021-12-01T00:00:00.00"},\
        "created_at":"2022-10-1\(r.int(0...9))T00:00:00.00","issued_at":"2022-10-2\(r.int(0...9))T00:00:00.00"}
        """
}

/// Bigwalk campaign list: a bare array of 5 campaigns.
func campaignList(_ r: inout SplitMix) -> String {
    let items = (0..<5).map { _ -> String in
        let id = r.int(1...100_000)
        let orgs = r.int(0...1) == 0 ? "[]" : #"[{"id":\#(r.int(1...99))}]"#
        let my = r.int(0...1) == 0 ? "null" : #"{"donatedSteps":\#(r.int(0...100_000)),"ranking":\#(r.int(1...999)),"lastDonatedDateTime":"2023-11-20T08:01:02.123","story":null}"#
        return """
            {"id":\(id),"name":"Campaign \(id) 걷기 기부","status":"\(r.int(0...3) == 0 ? "END" : "START")","ratio":\(r.int(0...150)),\
            "donatedSteps":\(r.int(0...10_000_000)),"goalPoint":10000000,"participantCount":\(r.int(0...9999)),\
            "startDate":"2023-11-0\(r.int(1...9))T00:00:00","endDate":"2023-12-\(r.int(10...31))T23:59:59","remainedDaysToEnd":\(r.int(-5...40)),\
            "categoryId":\(r.int(1...6)),"organizations":\(orgs),"campaignPromoter":{"name":"Bigwalk","id":7},"my":\(my),\
            "smallListThumbnailImagePath":"https://img.example.com/c/\(id)/s","mediumListThumbnailImagePath":"https://img.example.com/c/\(id)/m",\
            "largeListThumbnailImagePath":null,"detailThumbnailImagePath":"https://img.example.com/c/\(id)/d",\
            "beneficiary":"Animal shelter","event":null,"service":null,"enabled":true,"serviceOnTime":true,\
            "formattedStartDate":"2023.11.01 12:00","formattedEndDate":"2023.12.31 11:59"}
            """
    }
    return "[" + items.joined(separator: ",") + "]"
}

let hangoutCategories = ["Travel", "Eat out", "Cafe", "Cooking", "Boardgame", "Language Practice", "K-POP", "Movie", "Sports", "Projcets"]

/// One Bappy hangout object (about 900 bytes).
func hangoutObject(_ r: inout SplitMix) -> String {
    let id = r.int(1...1_000_000)
    let total = r.int(4...30)
    let joined = (0..<r.int(1...min(total, 8))).map { _ in "u\(r.int(100_000...999_999))" }
    let liked = (0..<r.int(0...4)).map { _ in "u\(r.int(100_000...999_999))" }
    func list(_ xs: [String], _ suffix: String) -> String { "[" + xs.map { "\"\($0)\(suffix)\"" }.joined(separator: ",") + "]" }
    let categories = [hangoutCategories[r.int(0...9)], hangoutCategories[r.int(0...9)]]
    return """
        {"hangoutInfoId":"h-\(id)","hangoutTitle":"Board games and coffee \(id)","hangoutPlan":"Bring your favourite game or learn a new one. Beginners welcome, we explain the rules.",\
        "hangoutMeetTime":"2024-05-\(r.int(10...28)) \(r.int(10...22)):\(r.int(0...5))0","hangoutLanguage":"English","hangoutCategory":\(list(categories, "")),\
        "hangoutOpenChat":"https://open.kakao.com/o/g\(r.int(10_000_000...99_999_999))","hangoutTotalNum":\(total),"hangoutCurrentNum":\(joined.count),\
        "hangoutLikeCount":\(liked.count),"hangoutImageUrl":"\(r.next() % 100_000_000).jpg",\
        "place":{"placeName":"Dice Cafe Seomyeon","placeAddress":"15 Jungang-daero 680beon-gil, Busanjin-gu","placeLatitude":35.\(r.int(100_000...299_999)),"placeLongitude":129.\(r.int(10_000...199_999))},\
        "hangoutJoinUserId":\(list(joined, "")),"hangoutJoinUserImageUrl":\(list(joined, ".jpg")),"hangoutLikeUserId":\(list(liked, "")),\
        "hangoutLikeUserImageUrl":\(list(liked, ".jpg")),"hangoutStatus":"open","hangoutLikeStatus":false,"hangoutJoinStatus":true,"isUpdate":false}
        """
}

/// `GET hangout/{id}`: one hangout in the envelope.
func hangoutDetail(_ r: inout SplitMix) -> String {
    #"{"status":"OK","message":"success","data":"# + hangoutObject(&r) + "}"
}

/// `GET hangout/list/{page}`: a page of 5 hangouts in the envelope.
func hangoutPage(_ r: inout SplitMix) -> String {
    let items = (0..<5).map { _ in hangoutObject(&r) }.joined(separator: ",")
    return #"{"status":"OK","message":"success","data":{"HangoutList":["# + items + #"],"pageInfo":{"totalCount":120,"currentCount":5}}}"#
}

/// An iGoMoney spending record (half in the server's date format, half in the client's).
func challengeRecord(_ r: inout SplitMix) -> String {
    let id = r.int(1...10_000_000)
    let images = (0..<r.int(1...3)).map { _ in
        #""https://igomoney-bucket.s3.ap-northeast-2.amazonaws.com/record/\#(id)/\#(r.next() % 1_000_000_000_000)""#
    }.joined(separator: ",")
    let day = r.int(10...28)
    let date = r.int(0...1) == 0 ? "2024-03-\(day)" : "24.03.\(day)"
    return """
        {"recordId":\(id),"challengeId":\(r.int(1...100_000)),"userId":\(r.int(1...1_000_000)),"title":"장보기 \(id)",\
        "content":"쌀과 계란, 우유","cost":\(r.int(0...50) * 500),"image":[\(images)],"date":"\(date)","hide":\(r.int(0...9) == 0)}
        """
}

let streams: [(name: String, make: (inout SplitMix) -> String)] = [
    ("ticker-default", tickerDefault), ("ticker-simple", tickerSimple),
    ("product-detail", productDetail), ("campaign-list5", campaignList),
    ("hangout-detail", hangoutDetail), ("hangout-page5", hangoutPage), ("challenge-record", challengeRecord),
]

@MainActor func generate(dir: String, count: Int) throws {
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    for (i, stream) in streams.enumerated() {
        var rng = SplitMix(state: UInt64(1000 + i))
        var text = ""
        for _ in 0..<count { text += stream.make(&rng) + "\n" }
        try text.write(toFile: "\(dir)/\(stream.name).jsonl", atomically: true, encoding: .utf8)
    }
}

/// Decodes every message once; returns (decoded events, failures). The event count feeds the
/// checksum so the optimiser cannot drop the work.
func decodeOnce(_ stream: String, _ messages: [[UInt8]]) -> (Int, Int) {
    var events = 0
    var failures = 0
    switch stream {
    case "ticker-default", "ticker-simple":
        let d = PriceTickDecoder()
        for m in messages {
            do { try d.decode(m[...]) { events &+= Int($0.tradeTimestamp & 1) &+ 1 } } catch { failures += 1 }
        }
    case "product-detail":
        let d = ProductDecoder()
        for m in messages {
            do { events &+= try d.decode(m).count } catch { failures += 1 }
        }
    case "product-detail+strings":
        // The same, then every text property read as a `String` (a product keeps its text in one
        // buffer and makes a String when asked): what a consumer reading all of it pays.
        let d = ProductDecoder()
        for m in messages {
            do {
                for p in try d.decode(m) {
                    var n = p.name.utf8.count &+ p.thumbnail.utf8.count
                    n &+= (p.vendorName?.utf8.count ?? 0) &+ (p.description?.utf8.count ?? 0)
                    for image in p.images { n &+= image.url.utf8.count &+ (image.thumbnailURL?.utf8.count ?? 0) }
                    events &+= 1 &+ (n & 1)
                }
            } catch { failures += 1 }
        }
    case "hangout-detail", "hangout-page5":
        let d = HangoutDecoder()
        for m in messages {
            do { events &+= try d.decode(m).count } catch { failures += 1 }
        }
    case "challenge-record":
        let d = ChallengeDecoder()
        for m in messages {
            do { events &+= try d.decode(m).count } catch { failures += 1 }
        }
    default:
        let d = CampaignDecoder()
        for m in messages {
            do { events &+= try d.decode(m).count } catch { failures += 1 }
        }
    }
    return (events, failures)
}

@MainActor func run(dir: String, seconds: Double, only: String?) throws {
    for stream in streams.map(\.name) + ["product-detail+strings"] where only == nil || only == stream {
        let file = stream.split(separator: "+").first.map(String.init) ?? stream  // product-detail+strings reads product-detail
        let text = try String(contentsOfFile: "\(dir)/\(file).jsonl", encoding: .utf8)
        let messages = text.split(separator: "\n").map { Array($0.utf8) }
        let bytes = messages.reduce(0) { $0 + $1.count }
        let (_, failures) = decodeOnce(stream, messages)  // warm-up, and the failure count
        let clock = ContinuousClock()
        var rates: [Double] = []
        var checksum = 0
        for _ in 0..<5 {
            var passes = 0
            let start = clock.now
            var elapsed = 0.0
            repeat {
                checksum &+= decodeOnce(stream, messages).0
                passes += 1
                let d = clock.now - start
                elapsed = Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
            } while elapsed < seconds
            rates.append(Double(passes * messages.count) / elapsed)
        }
        // Best of 5: the machine is shared, and interference only ever slows a repetition down.
        let msgsPerSecond = rates.max() ?? 0
        let mbPerSecond = msgsPerSecond * Double(bytes) / Double(messages.count) / 1e6
        print("\(stream)\t\(messages.count)\t\(bytes)\t\(Int(msgsPerSecond))\t\(String(format: "%.1f", mbPerSecond))\t\(failures)\t# checksum \(checksum)")
    }
}

let args = CommandLine.arguments
switch args.count >= 3 ? args[1] : "" {
case "generate": try generate(dir: args[2], count: args.count > 3 ? Int(args[3]) ?? 20_000 : 20_000)
case "run": try run(dir: args[2], seconds: args.count > 3 ? Double(args[3]) ?? 2 : 2, only: args.count > 4 ? args[4] : nil)
default:
    FileHandle.standardError.write(Data("usage: decode-bench generate DIR [COUNT] | run DIR [SECONDS [STREAM]]\n".utf8))
    exit(2)
}
