import Testing
@testable import Pipeline
@testable import Kafka

/// The checkpoint header: the offsets of every input partition of a lane, and the record it makes.
@Suite struct ChangelogTests {
    @Test func offsetsRoundTripThroughTheHeader() throws {
        let changelog = Changelog(topic: "news.changelog", partitions: 3, stage: "news")
        let lane = TopicPartition("products.raw+thumbnails.ready", 4)
        let offsets = [TopicPartitionOffset("products.raw", 4, offset: 120), TopicPartitionOffset("thumbnails.ready", 4, offset: 7)]
        let record = try changelog.record(state: ["k": 1], offsets: offsets, for: lane)
        #expect(record.partition == 1, "lane partition 4 mod 3 changelog partitions")
        #expect(record.key == Array("news/products.raw+thumbnails.ready/4".utf8), "the key names the stage and the lane")
        let header = try #require(record.headers.first { $0.key == Changelog.offsetsHeader }?.value)
        #expect(String(decoding: header, as: UTF8.self) == "products.raw/4=120,thumbnails.ready/4=7")
        #expect(Changelog.offsets(String(decoding: header, as: UTF8.self)) == [
            TopicPartition("products.raw", 4): 120, TopicPartition("thumbnails.ready", 4): 7,
        ])
        #expect(Changelog.offsets("") == nil)
        #expect(Changelog.offsets("prices.raw/x=1") == nil, "a malformed header is no checkpoint")
        #expect(Changelog.offsets("prices.raw/2=") == nil)
    }
}
