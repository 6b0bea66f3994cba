/// A topic and a partition.
public struct TopicPartition: Sendable, Hashable, Codable, CustomStringConvertible {
    public var topic: String
    public var partition: Int32
    public init(_ topic: String, _ partition: Int32) {
        self.topic = topic
        self.partition = partition
    }
    public var description: String { "\(topic)[\(partition)]" }
}

/// A topic, a partition and an offset (for commits: the next offset to read).
public struct TopicPartitionOffset: Sendable, Hashable, CustomStringConvertible {
    public var topic: String
    public var partition: Int32
    public var offset: Int64
    public init(_ topic: String, _ partition: Int32, offset: Int64) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
    }
    public var topicPartition: TopicPartition { TopicPartition(topic, partition) }
    public var description: String { "\(topic)[\(partition)]@\(offset)" }
    /// librdkafka's logical offsets (`RD_KAFKA_OFFSET_BEGINNING`, `RD_KAFKA_OFFSET_END`).
    public static let beginning: Int64 = -2
    public static let end: Int64 = -1
}

/// A record header. A header may have no value.
public struct KafkaHeader: Sendable, Hashable {
    public var key: String
    public var value: [UInt8]?
    public init(key: String, value: [UInt8]?) {
        self.key = key
        self.value = value
    }
    public init(key: String, string: String) {
        self.key = key
        self.value = Array(string.utf8)
    }
}

/// A record to produce.
public struct ProducerRecord: Sendable, Hashable {
    public var topic: String
    /// `nil` lets the partitioner choose (by key hash when there is a key).
    public var partition: Int32?
    public var key: [UInt8]?
    /// `nil` produces a tombstone.
    public var value: [UInt8]?
    public var headers: [KafkaHeader]
    /// Milliseconds since the epoch; `nil` lets librdkafka stamp the send time.
    public var timestamp: Int64?

    public init(
        topic: String,
        partition: Int32? = nil,
        key: [UInt8]? = nil,
        value: [UInt8]?,
        headers: [KafkaHeader] = [],
        timestamp: Int64? = nil
    ) {
        self.topic = topic
        self.partition = partition
        self.key = key
        self.value = value
        self.headers = headers
        self.timestamp = timestamp
    }
}

/// A record read by a consumer.
public struct ConsumerRecord: Sendable, Hashable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64
    public var key: [UInt8]?
    /// The value as the consumer read it, `nil` for a tombstone: a slice of the buffer the
    /// values of its batch were copied into (one allocation per batch, not one per record).
    public var valueBytes: ArraySlice<UInt8>? {
        get { hasValue ? bytes : nil }
        set {
            hasValue = newValue != nil
            bytes = newValue ?? []
        }
    }
    // A slice and a flag rather than an optional slice, as in `InputRecord`: copies of an
    // `ArraySlice<UInt8>?` go through generic value witnesses.
    private var bytes: ArraySlice<UInt8>
    private var hasValue: Bool
    public var headers: [KafkaHeader]
    /// Milliseconds since the epoch, if the record has a timestamp.
    public var timestamp: Int64?

    public init(topic: String, partition: Int32, offset: Int64, key: [UInt8]?, value: [UInt8]?, headers: [KafkaHeader] = [], timestamp: Int64? = nil) {
        self.init(topic: topic, partition: partition, offset: offset, key: key, sharing: value.map { $0[...] }, headers: headers, timestamp: timestamp)
    }

    /// A record whose value is a slice of a larger buffer, kept without a copy.
    public init(
        topic: String, partition: Int32, offset: Int64, key: [UInt8]?, sharing value: ArraySlice<UInt8>?, headers: [KafkaHeader] = [],
        timestamp: Int64? = nil
    ) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.bytes = value ?? []
        self.hasValue = value != nil
        self.headers = headers
        self.timestamp = timestamp
    }

    /// The value as an array of its own (a copy of ``valueBytes``; nil for a tombstone).
    public var value: [UInt8]? {
        get { valueBytes.map(Array.init) }
        set { valueBytes = newValue.map { $0[...] } }
    }

    public var topicPartition: TopicPartition { TopicPartition(topic, partition) }

    /// The first header with this key.
    public func header(_ key: String) -> [UInt8]? {
        headers.first { $0.key == key }?.value ?? nil
    }
}

/// Where a produced message landed, or why it did not.
public struct DeliveryReport: Sendable, Hashable {
    /// The id ``KafkaProducer/enqueue(_:)`` returned, or the index within a batch ``KafkaProducer/send(_:)``.
    public var id: UInt64
    public var partition: Int32
    /// The offset assigned by the broker; -1 when unknown or on error.
    public var offset: Int64
    public var error: KafkaError?

    public init(id: UInt64, partition: Int32, offset: Int64, error: KafkaError?) {
        self.id = id
        self.partition = partition
        self.offset = offset
        self.error = error
    }
}
