import Foundation
import Kafka
import Operations

/// The topic pages: every topic, one topic's newest records with filters and a live tail, and
/// one record whole.
extension ConsolePages {
    /// Every topic with its partitions and which stages read and write it.
    func topics(_ topics: [TopicDescription], error: String?) -> String {
        var body = """
            <h1>Topics</h1>
            <p class="muted">Every topic of the cluster (outputs, dead letters and the pipeline's own included), read without joining any group.</p>
            """
        if let error { body += "<p class=\"error\">cannot list the topics: \(HTML.text(error))</p>" }
        body += "<table class=\"topics\"><thead><tr><th>topic</th><th>partitions</th><th>read by</th><th>written by</th></tr></thead><tbody>"
        let stages = state.topology.stages
        for t in topics {
            let readers = stages.filter { $0.inputs.contains(t.name) }.map(\.name)
            let writers = stages.filter { $0.outputs.values.contains(t.name) || $0.deadLetterTopic == t.name }.map(\.name)
            func links(_ names: [String]) -> String { names.map { "<a href=\"/stages/\(HTML.query($0))\">\(HTML.text($0))</a>" }.joined(separator: ", ") }
            body += """
                <tr data-topic="\(HTML.text(t.name))"><td><a href="/topics/\(HTML.query(t.name))">\(HTML.text(t.name))</a></td><td class="count">\(t.partitions)</td>\
                <td>\(links(readers))</td><td>\(links(writers))</td></tr>
                """
        }
        body += "</tbody></table>"
        return HTML.page(title: "Topics", nav: "/topics", body: body)
    }

    /// A value's first 200 characters, the rest on the record's own page.
    static func preview(_ value: [UInt8]?) -> String {
        guard let value else { return "(tombstone)" }
        let text = HTML.bytes(value).text
        return text.count > 200 ? String(text.prefix(200)) + "…" : text
    }

    /// One topic's newest records, newest first, with the filter form; with `tail`, the page
    /// adds what arrives (console.js asks `/api/topics/NAME/tail` every 2 s).
    func topic(_ name: String, filter: TopicFilter, browsed: BrowsedRecords?, scanPerPartition: Int64, tail: Bool, error: String?) -> String {
        let path = "/topics/\(HTML.query(name))"
        var body = """
            <h1>Topic \(HTML.text(name))</h1>
            <form method="get" action="\(path)" class="filter">\
            <label>partition <input name="partition" value="\(filter.partition.map(String.init) ?? "")" size="5" placeholder="all"></label>\
            <label>key <input name="key" value="\(HTML.text(filter.key ?? ""))" placeholder="exactly this key"></label>\
            <label>value contains <input name="contains" value="\(HTML.text(filter.contains ?? ""))"></label>\
            <label>show <input name="limit" value="\(filter.limit)" size="4"></label>\
            <label><input type="checkbox" name="tail" value="on"\(tail ? " checked" : "")> live tail</label>\
            <button type="submit" id="browse">Show</button> <a href="\(path)">clear</a></form>
            """
        if let error { body += "<p class=\"error\">\(HTML.text(error))</p>" }
        guard let browsed else { return HTML.page(title: name, nav: "/topics", body: body) }
        body += """
            <p id="browsed">\(browsed.matched > browsed.records.count ? "\(HTML.count(Int64(browsed.matched))) match; the newest \(browsed.records.count) are shown" : "\(browsed.matched) match"), \
            newest first, of the newest \(HTML.count(Int64(browsed.scanned))) records read (at most \(HTML.count(scanPerPartition)) per partition).\
            \(tail ? " <span id=\"tailing\">Live: records that arrive are added at the top.</span>" : "")</p>
            """
        body += """
            <table class="records"\(tail ? " data-topic=\"\(HTML.text(name))\" data-after=\"\(HTML.text(browsed.after.text))\" data-filter=\"\(HTML.text(filter.query))\"" : "")>\
            <thead><tr><th>written</th><th>partition</th><th>offset</th><th>key</th><th>value</th><th>headers</th><th></th></tr></thead><tbody>
            """
        for r in browsed.records { body += Self.recordRow(r, topic: name) }
        body += "</tbody></table>"
        return HTML.page(title: name, nav: "/topics", live: tail ? "tail" : nil, body: body)
    }

    static func recordLink(_ topic: String, _ r: ConsumerRecord) -> String { "/topics/\(HTML.query(topic))/\(r.partition)/\(r.offset)" }

    static func recordRow(_ r: ConsumerRecord, topic: String) -> String {
        let key = r.key.map { HTML.bytes($0).text } ?? "(none)"
        return """
            <tr data-offset="\(r.partition):\(r.offset)"><td>\(HTML.text(HTML.time(r.timestamp)))</td><td>\(r.partition)</td><td>\(r.offset)</td>\
            <td class="key">\(HTML.text(String(key.prefix(80))))</td><td class="key">\(HTML.text(preview(r.value)))</td><td class="count">\(r.headers.count)</td>\
            <td><a href="\(HTML.text(recordLink(topic, r)))">whole record</a></td></tr>
            """
    }

    /// A record of the live tail as the script adds it (its cells as text, never as HTML).
    static func tailRecord(_ r: ConsumerRecord, topic: String) -> TailJSON.Record {
        TailJSON.Record(
            written: HTML.time(r.timestamp), partition: r.partition, offset: r.offset,
            key: String((r.key.map { HTML.bytes($0).text } ?? "(none)").prefix(80)), value: preview(r.value),
            headers: r.headers.count, link: recordLink(topic, r))
    }
}

/// What `/api/topics/NAME/tail` answers: the records after the position, oldest first, and the
/// position to ask from next.
struct TailJSON: Codable {
    struct Record: Codable {
        var written: String
        var partition: Int32
        var offset: Int64
        var key: String
        var value: String
        var headers: Int
        var link: String
    }

    var records: [Record]
    var after: String
}

extension ConsolePages {

    /// One record whole: key, value and headers as their exact bytes, and where it went.
    func record(_ r: ConsumerRecord, topic: String) -> String {
        var body = """
            <h1>\(HTML.text(topic)) partition \(r.partition) offset \(r.offset)</h1>
            <dl><dt>written</dt><dd>\(HTML.text(HTML.time(r.timestamp)))</dd><dt>value size</dt><dd>\(r.value.map { "\($0.count) bytes" } ?? "a tombstone")</dd></dl>
            <h2>Key</h2>\(Self.exactBlock(r.key))<h2>Value</h2>\(Self.exactBlock(r.value))
            <h2>Headers</h2><table class="headers"><thead><tr><th>name</th><th>value</th></tr></thead><tbody>
            """
        for h in r.headers {
            let (value, valid) = h.value.map(HTML.bytes) ?? ("(null)", true)
            body += "<tr><td>\(HTML.text(h.key))</td><td>\(HTML.text(value))\(valid ? "" : " <span class=\"warning\">(not valid UTF-8)</span>")</td></tr>"
        }
        body += "</tbody></table><p>"
        // The Find page says what each stage reading the topic did with it.
        if state.topology.stages.contains(where: { $0.inputs.contains(topic) }) {
            body += "<a href=\"/find?topic=\(HTML.query(topic))&amp;by=offset&amp;value=\(r.partition)%3A\(r.offset)\">what each stage did with it</a> · "
        }
        body += "<a href=\"/topics/\(HTML.query(topic))\">the topic's newest records</a></p>"
        return HTML.page(title: "\(topic) \(r.partition)/\(r.offset)", nav: "/topics", body: body)
    }
}
