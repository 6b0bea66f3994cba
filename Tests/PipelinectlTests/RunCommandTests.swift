import ArgumentParser
import Foundation
import Testing

@testable import pipelinectl

@Suite struct RunCommandTests {
    private func parse(_ args: [String]) throws -> Run {
        let command = try PipelineCtl.parseAsRoot(["run"] + args)
        return try #require(command as? Run)
    }

    @Test func unknownStageIsNamedInTheError() {
        #expect {
            _ = try PipelineCtl.parseAsRoot(["run", "--transform", "prices.decode,prices.candle"])
        } throws: { error in
            let message = PipelineCtl.message(for: error)
            return message.contains("unknown stage 'prices.candle'") && message.contains("prices.candles")
        }
    }

    @Test func badFlagsAreNamed() {
        for (args, text) in [
            (["--transform", "prices.alerts", "--alert", "tok1:KRW-BTC"], "--alert"),
            (["--transform", "campaigns.feed", "--feed-user", "cookie"], "--feed-user"),
            (["--transform", ","], "--transform"),
            (["--transform", "prices.decode", "--bogus"], "--bogus"),
        ] {
            #expect {
                _ = try PipelineCtl.parseAsRoot(["run"] + args)
            } throws: { error in
                PipelineCtl.message(for: error).contains(text)
            }
        }
    }

    @Test func runsAChainOverLinesGolden() throws {
        let run = try parse(["--transform", "prices.decode,prices.candles", "--candle-lateness-ms", "0"])
        let lines = [
            #"{"code":"KRW-BTC","trade_price":100,"signed_change_rate":0,"trade_volume":1,"trade_timestamp":1699931521000}"#,
            #"{"code":"KRW-BTC","trade_price":"oops"}"#,
            #"{"code":"KRW-BTC","trade_price":101,"signed_change_rate":0,"trade_volume":2,"trade_timestamp":1699931581000}"#,
        ]
        var out: [String] = []
        try run.execute(lines: lines) { out.append($0) }
        #expect(out == [
            #"{"type":"dead-letter","key":null,"value":{"code":"KRW-BTC","trade_price":"oops"},"headers":{"dead-letter.stage":"prices.decode,prices.candles","dead-letter.transform":"prices.decode,prices.candles","dead-letter.reason":"wrong-type","dead-letter.field":"trade_price","dead-letter.detail":"expected number, found string","dead-letter.origin.topic":"stdin","dead-letter.origin.partition":"0","dead-letter.origin.offset":"1","dead-letter.attempts":"1"}}"#,
            #"{"type":"output","output":"prices.candles.1m","key":"KRW-BTC|2023-11-14T03:12","value":{"market":"KRW-BTC","candle_date_time_utc":"2023-11-14T03:12:00","opening_price":100,"high_price":100,"low_price":100,"trade_price":100,"timestamp":1699931521000,"candle_acc_trade_price":100,"candle_acc_trade_volume":1,"unit":1},"headers":{},"dedupe_key":"candle:KRW-BTC:1699931520000"}"#,
        ])
    }

    @Test func readsAnInputFile() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("run-\(UUID().uuidString).jsonl").path
        try #"{"value":{"title":"t","body":"b","topic":"x","dedupe_key":"d"},"key":"k"}"#.write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let run = try parse(["--transform", "notifications.render", "--input", path])
        let handle = try #require(FileHandle(forReadingAtPath: path))
        var out: [String] = []
        try run.execute(lines: LineSequence(handle: handle)) { out.append($0) }
        #expect(out.count == 1, "a topic: FCM's payload only")
        #expect(out.first?.contains(#""output":"notifications.fcm""#) == true)
    }
}
