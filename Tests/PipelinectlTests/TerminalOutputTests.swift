import Foundation
import Testing
import TextTable
@testable import pipelinectl

/// pipelinectl's layout of TextTable tables and the progress line drawn by ConsoleKit.
@Suite struct TerminalOutputTests {
    struct Row {
        var group: String
        var partition: Int
        var status: String
    }

    enum Angles: CellPaint {
        static func paint(_ text: String, column: String) -> String? { column == "PARTITION" ? "<\(text)>" : nil }
    }

    @Test func tableLayout() {
        let table = TextTable<Row> { r in
            [Column("GROUP" <- r.group), Column("PARTITION" <- r.partition, align: .right), Column("STATUS" <- r.status)]
        }
        let rows = [Row(group: "prices-candles", partition: 0, status: "OK"), Row(group: "feed", partition: 12, status: "STALL")]
        #expect(table.render(rows) == """
            GROUP           PARTITION  STATUS
            prices-candles          0  OK
            feed                   12  STALL
            """)
        // Paint goes on after padding, around the text (for colour codes, which take no room):
        // the padding is the unpainted text's; the header is never painted.
        #expect(table.render(rows, paint: Angles.self) == """
            GROUP           PARTITION  STATUS
            prices-candles          <0>  OK
            feed                   <12>  STALL
            """)
        #expect(table.render([Row]()) == nil)
    }

    @Test func progressLine() {
        var known = RecordProgress(label: "producing to prices.raw", total: 100)
        known.done = 50
        #expect(known.line(tick: 1, barWidth: 24, now: known.start + .seconds(10))
            == "producing to prices.raw [============            ] 50/100 ETA 10s 5/s")
        var unknown = RecordProgress(label: "reading dlq")
        unknown.done = 30
        unknown.extra = "matched 3"
        #expect(unknown.line(tick: 0, barWidth: 10, now: unknown.start + .seconds(3)) == "reading dlq [•         ] 30 10/s matched 3")
        let off = ProgressIndicator("reading dlq", enabled: false)
        off.update(5)
        off.finish()
    }
}
