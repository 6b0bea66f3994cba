import ArgumentParser
import Foundation
import Operations
import Testing
@testable import pipelinectl

/// Every operator flag that takes a number, fed whole numbers at and beyond every edge: a value
/// out of its range (or no number at all) is refused before the command runs, with a message
/// that names the flag; a value in range is taken.
// Serialized, and with the edges that tell ranges apart only: each refusal renders the command's
// usage, and 20 flags × 33 values in parallel held both cores of a test run for 40 s (every
// timing-sensitive suite running beside it suffered).
@Suite(.serialized) struct NumberFlagTests {
    static let extremes = [
        "9223372036854775807", "-9223372036854775808", "9223372036854775808", "99999999999999999999999999999999999999", "-1", "0",
        "1", "2147483648", "1000000000000000", "1000000000000001", "1714953600000", "253402300800000", "abc", "", "5.0", "1e3",
    ]

    /// The message the command line gives for `args`, "" when they parse.
    static func message(_ args: [String]) -> String {
        do {
            _ = try PipelineCtl.parseAsRoot(args)
            return ""
        } catch {
            return PipelineCtl.message(for: error)
        }
    }

    /// A whole number in `range`.
    static func whole(_ range: ClosedRange<Int64>) -> @Sendable (String) -> Bool { { Int64($0).map(range.contains) ?? false } }
    /// A time as the command line takes it, of the extremes: epoch ms of ten digits or more, from 1970 to 9999.
    static let time: @Sendable (String) -> Bool = { v in Int64(v).map { v.count >= 10 && NumberBounds.epochMillis.contains($0) } ?? false }

    struct Flag: Sendable, CustomStringConvertible {
        var flag: String
        var args: @Sendable (String) -> [String]
        var valid: @Sendable (String) -> Bool
        var description: String { flag }
    }

    static let b = ["--bootstrap-server", "h:1"]
    static let flags: [Flag] = {
        let reset = ["groups", "reset-offsets", "g", "--topic", "t"]
        return [
            Flag(flag: "--shift-by", args: { reset + ["--shift-by", $0] + b }, valid: whole(NumberBounds.shift)),
            Flag(flag: "--to-offset", args: { reset + ["--to-offset", $0] + b }, valid: whole(NumberBounds.offset)),
            Flag(flag: "--partition", args: { reset + ["--to-earliest", "--partition", $0] + b }, valid: whole(NumberBounds.partition)),
            Flag(flag: "--to-datetime", args: { reset + ["--to-datetime", $0] + b }, valid: time),
            Flag(flag: "--offset", args: { ["dlq", "list", "--partition", "0", "--offset", $0] + b }, valid: whole(NumberBounds.offset)),
            Flag(flag: "--partition", args: { ["dlq", "list", "--partition", $0] + b }, valid: whole(NumberBounds.partition)),
            Flag(flag: "--from", args: { ["dlq", "show", "--from", "0:\($0)"] + b }, valid: whole(NumberBounds.offset)),
            Flag(flag: "--from", args: { ["dlq", "show", "--from", "\($0):0"] + b }, valid: whole(NumberBounds.partition)),
            Flag(flag: "--since", args: { ["dlq", "list", "--since", $0] + b }, valid: time),
            Flag(flag: "--until", args: { ["dlq", "redrive", "--until", $0] + b }, valid: time),
            Flag(flag: "--max-redrives", args: { ["dlq", "redrive", "--max-redrives", $0] + b }, valid: whole(1...Int64.max)),
            Flag(flag: "--from-offset", args: { ["replay", "t", "--from-offset", $0] + b }, valid: whole(NumberBounds.offset)),
            Flag(flag: "--to-offset", args: { ["replay", "t", "--to-offset", $0] + b }, valid: whole(NumberBounds.offset)),
            Flag(flag: "--partition", args: { ["replay", "t", "--partition", $0] + b }, valid: whole(NumberBounds.partition)),
            Flag(flag: "--since", args: { ["replay", "t", "--since", $0] + b }, valid: time),
            Flag(flag: "--rate", args: { ["replay", "t", "--rate", $0] + b }, valid: { Double($0).map { $0.isFinite && $0 >= 0.001 } ?? false }),
            Flag(flag: "--interval", args: { ["lag", "--interval", $0 + "s"] + b }, valid: { v in v.allSatisfy(\.isNumber) && Int64(v).map { $0 > 0 && $0 <= Int64.max / 1000 } ?? false }),
            Flag(flag: "--max-redrives", args: { ["console", "--max-redrives", $0] + b }, valid: whole(1...Int64.max)),
            Flag(flag: "--dead-letters-per-partition", args: { ["console", "--dead-letters-per-partition", $0] + b }, valid: whole(1...Int64.max)),
            Flag(flag: "--listen", args: { ["console", "--listen", "127.0.0.1:\($0)"] + b }, valid: whole(0...65535)),
            Flag(flag: "--linger", args: { ["ingest", "http", "--linger", $0 + "ms"] + b }, valid: whole(0...900_000)),
            Flag(flag: "--event-loops", args: { ["ingest", "http", "--event-loops", $0] + b }, valid: whole(1...256)),
            Flag(flag: "--linger", args: { ["worker", "s", "--linger", $0 + "ms"] + b }, valid: whole(0...900_000)),
        ]
    }()

    @Test(arguments: flags) func everyNumberFlagIsRangeChecked(_ flag: Flag) {
        for value in Self.extremes {
            let message = Self.message(flag.args(value))
            if flag.valid(value) {
                #expect(message.isEmpty, "\(flag) '\(value)' is in range: \(message)")
            } else {
                #expect(!message.isEmpty, "\(flag) '\(value)' is out of range, or not a number: refused")
                #expect(message.contains(flag.flag), "\(flag) '\(value)': the message names the flag: \(message)")
            }
        }
    }

    /// The shift that stopped `pipelinectl groups reset-offsets` (exit 132, an overflow trap)
    /// is refused with the range.
    @Test func theShiftThatStoppedTheCommandIsRefused() {
        let message = Self.message(["groups", "reset-offsets", "G", "--topic", "T", "--shift-by", "9223372036854775807"] + Self.b)
        #expect(message.contains("--shift-by: '9223372036854775807' is not a shift from -1000000000000000 to 1000000000000000"), "\(message)")
    }
}
