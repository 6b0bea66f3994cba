import Foundation
import TextTable

// The operator commands' tables are ordo-one/TextTable tables (`TextTable<Row> { [Column(...)] }`):
// the library maps each row to its columns, sizes the columns, aligns and pads the cells.
// `Layout` is the TextTable style they print in.

/// The look pipelinectl's tables always had: a header line, then one line per row, two spaces
/// between columns, no rule under the header, no trailing spaces. The cells are padded and
/// aligned by the library's `Plain` style; `Paint` may colour a cell after padding, so colour
/// codes never count toward a column's width.
enum Layout<Paint: CellPaint>: TextTableStyle {
    static func prepare(_ s: String, for column: Column) -> String { Plain.prepare(s, for: column) }
    static func escape(_ s: String) -> String { s }
    static func begin(_ table: inout String, index: Int, columns: [Column]) {}
    static func end(_ table: inout String, index: Int, columns: [Column]) {}

    static func header(_ table: inout String, index: Int, columns: [Column]) {
        line(&table, columns.map { $0.headerString(for: self) })
    }

    static func row(_ table: inout String, index: Int, columns: [Column]) {
        line(&table, columns.map { column in
            let cell = column.string(for: self)
            let text = cell.trimmingCharacters(in: .whitespaces)
            let title = column.headerString(for: self).trimmingCharacters(in: .whitespaces)
            guard !text.isEmpty, let painted = Paint.paint(text, column: title) else { return cell }
            // The padding stays outside the colour.
            return String(cell.prefix { $0 == " " }) + painted + String(cell.reversed().prefix { $0 == " " })
        })
    }

    private static func line(_ table: inout String, _ cells: [String]) {
        var line = cells.joined(separator: "  ")
        while line.last == " " { line.removeLast() }
        table += line + "\n"
    }
}

/// Colour for some cells of a table: given a cell's text and its column's title, the text to print
/// instead, or nil to leave it.
protocol CellPaint {
    static func paint(_ text: String, column: String) -> String?
}

/// No colour.
enum NoPaint: CellPaint {
    static func paint(_ text: String, column: String) -> String? { nil }
}

/// The STATUS column in colour when stdout is a terminal (`Terminal.status`: OK green, WARN yellow,
/// the rest red).
enum StatusPaint: CellPaint {
    static func paint(_ text: String, column: String) -> String? { column == "STATUS" ? Terminal.status(text) : nil }
}

extension TextTable {
    /// The rows in `Layout`: the header and one line per row, without a trailing newline; nil
    /// when there are no rows (the library draws no table, not even the header, without one).
    func render<Rows: Collection, Paint: CellPaint>(_ rows: Rows, paint: Paint.Type = NoPaint.self) -> String? where Rows.Element == T {
        string(for: rows, style: Layout<Paint>.self).map { String($0.dropLast()) }
    }
}
