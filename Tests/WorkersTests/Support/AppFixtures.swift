import Foundation
import Workers

/// Bappy (hangouts) and iGoMoney (challenges) messages written for these tests after
/// formats.md §4 and §5.
enum AppFixtures {
    /// formats.md §4's example, verbatim (enveloped hangout detail).
    static let hangoutEnvelope = """
        {"status":"OK","message":"ok","data":{"hangoutInfoId":"h-91","hangoutTitle":"Board games on Friday",\
        "hangoutMeetTime":"2024-05-10 19:30","hangoutLanguage":"English","hangoutCategory":["Boardgame","Cafe"],\
        "hangoutOpenChat":"https://chat.example/x1","hangoutTotalNum":6,"hangoutCurrentNum":2,"hangoutLikeCount":1,\
        "hangoutImageUrl":"a1b2.jpg","place":{"placeName":"Dice Cafe","placeAddress":"5 Main St","placeLatitude":35.23,"placeLongitude":129.08},\
        "hangoutJoinUserId":["u1","u2"],"hangoutJoinUserImageUrl":["u1.jpg","u2.jpg"],"hangoutLikeUserId":["u3"],\
        "hangoutLikeUserImageUrl":["u3.jpg"],"hangoutStatus":"open","hangoutLikeStatus":false,"hangoutJoinStatus":true,"isUpdate":false}}
        """

    /// The example's hangout as the bare object, with the plan the example leaves out.
    static func hangout(
        id: String = "h-91", meet: String = "2024-05-10 19:30", lat: Double = 35.23, lng: Double = 129.08,
        placeName: String = "Dice Cafe", joined: [String] = ["u1", "u2"], total: Int = 6, status: String = "open"
    ) -> String {
        let ids = joined.map { "\"\($0)\"" }.joined(separator: ",")
        let images = joined.map { "\"\($0).jpg\"" }.joined(separator: ",")
        return """
            {"hangoutInfoId":"\(id)","hangoutTitle":"Board games on Friday","hangoutPlan":"Bring a game, we teach the rules.",\
            "hangoutMeetTime":"\(meet)","hangoutLanguage":"English","hangoutCategory":["Boardgame","Cafe"],\
            "hangoutOpenChat":"https://chat.example/x1","hangoutTotalNum":\(total),"hangoutCurrentNum":\(joined.count),"hangoutLikeCount":1,\
            "hangoutImageUrl":"a1b2.jpg","place":{"placeName":"\(placeName)","placeAddress":"5 Main St","placeLatitude":\(lat),"placeLongitude":\(lng)},\
            "hangoutJoinUserId":[\(ids)],"hangoutJoinUserImageUrl":[\(images)],"hangoutLikeUserId":["u3"],\
            "hangoutLikeUserImageUrl":["u3.jpg"],"hangoutStatus":"\(status)","hangoutLikeStatus":false,"hangoutJoinStatus":true,"isUpdate":false}
            """
    }

    static func join(_ hangout: String, _ user: String, _ action: String = "join") -> String {
        #"{"method":"PUT","path":"hangout/\#(hangout)","userId":"\#(user)","form":{"action":"\#(action)"}}"#
    }

    /// 2024-05-10 19:30 KST.
    static let meet: Int64 = 1_715_337_000_000

    /// formats.md §5's examples, verbatim.
    static let challenge = """
        {"id":42,"leaderId":7,"competitorId":9,"winnerId":null,"recordId":null,"title":"Lunchbox week","content":"Cook at home",\
        "targetAmount":30000,"categoryId":2,"startDate":"2024-03-04","term":7,"endDate":null}
        """
    static let record = """
        {"recordId":310,"challengeId":42,"userId":9,"title":"Groceries","content":"Rice and eggs","cost":8500,\
        "image":["https://files.example/5e6f"],"date":"2024-03-05","hide":false}
        """

    static func challenge(id: Int = 42, leader: Int = 7, competitor: Int? = nil, start: String = "2024-03-04") -> String {
        #"{"id":\#(id),"leaderId":\#(leader),"competitorId":\#(competitor.map(String.init) ?? "null"),"winnerId":null,"recordId":null,"title":"Lunchbox week","content":"Cook at home","targetAmount":30000,"categoryId":2,"startDate":"\#(start)","term":7,"endDate":null}"#
    }

    static func record(_ id: Int, challenge: Int = 42, user: Int, cost: Int, date: String, images: Int = 1) -> String {
        let urls = (0..<images).map { #""https://files.example/r\#(id)-\#($0)""# }.joined(separator: ",")
        return #"{"recordId":\#(id),"challengeId":\#(challenge),"userId":\#(user),"title":"Spend","content":"c","cost":\#(cost),"image":[\#(urls)],"date":"\#(date)","hide":false}"#
    }

    /// 2024-03-04 00:00 KST: challenge 42's first day.
    static let day0: Int64 = 1_709_478_000_000
    static let day: Int64 = 86_400_000
    static let hour: Int64 = 3_600_000

    /// The repository's sample files for one app (`samples/<app>/*.jsonl`), as lines.
    static func sampleLines(_ app: String) throws -> [(file: String, line: String)] {
        let root = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let dir = root.appendingPathComponent("samples").appendingPathComponent(app)
        let files = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasSuffix(".jsonl") }.sorted()
        var out: [(String, String)] = []
        for f in files {
            let text = try String(contentsOf: dir.appendingPathComponent(f), encoding: .utf8)
            for line in text.split(separator: "\n") where !line.isEmpty { out.append((f, String(line))) }
        }
        return out
    }
}
