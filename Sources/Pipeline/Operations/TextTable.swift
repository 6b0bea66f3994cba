/// A plain-text table: a header row and left- or right-aligned columns, two spaces apart.
///
/// Small on purpose (see the operator-commands report): aligned columns and optional
/// colour on a terminal are all the commands need, and a terminal-UI dependency would cost a
/// dependency tree and build time for that.
public struct TextTable: Sendable {
    public enum Alignment: Sendable { case left, right }

    public var columns: [(title: String, alignment: Alignment)]
    public var rows: [[String]] = []

    public init(_ columns: [(String, Alignment)]) {
        self.columns = columns.map { (title: $0.0, alignment: $0.1) }
    }

    public mutating func append(_ row: [String]) {
        precondition(row.count == columns.count, "a row has \(row.count) cells for \(columns.count) columns")
        rows.append(row)
    }

    /// The table as lines (no trailing spaces). `style` may wrap a cell (e.g. in colour) after
    /// padding, given its row index (-1 for the header), column and text.
    public func render(style: (Int, Int, String) -> String? = { _, _, _ in nil }) -> String {
        var widths = columns.map { $0.title.count }
        for row in rows {
            for (i, cell) in row.enumerated() { widths[i] = max(widths[i], cell.count) }
        }
        func line(_ cells: [String], _ index: Int) -> String {
            var parts: [String] = []
            for (i, cell) in cells.enumerated() {
                let pad = String(repeating: " ", count: widths[i] - cell.count)
                let isLast = i == cells.count - 1
                let styled = style(index, i, cell) ?? cell
                parts.append(columns[i].alignment == .right ? pad + styled : styled + (isLast ? "" : pad))
            }
            return parts.joined(separator: "  ")
        }
        var out = [line(columns.map(\.title), -1)]
        for (i, row) in rows.enumerated() { out.append(line(row, i)) }
        return out.joined(separator: "\n")
    }
}
