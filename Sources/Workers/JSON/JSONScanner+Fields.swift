/// Field-level helpers shared by the stream decoders: null handling and range checks, each
/// throwing a ``DecodeFailure`` whose path the caller fills in.
extension JSONScanner {
    /// A number, or nil for JSON `null`.
    @inline(__always)
    mutating func readOptionalDouble() throws(DecodeFailure) -> Double? {
        if try consumeNull() { return nil }
        return try readDouble()
    }

    @inline(__always)
    mutating func readOptionalInt() throws(DecodeFailure) -> Int64? {
        if try consumeNull() { return nil }
        return try readInt()
    }

    mutating func readOptionalString() throws(DecodeFailure) -> String? {
        if try consumeNull() { return nil }
        return try readString()
    }

    mutating func readOptionalBool() throws(DecodeFailure) -> Bool? {
        if try consumeNull() { return nil }
        return try readBool()
    }

    /// A number that must be >= 0 (prices, volumes); null is nil.
    @inline(__always)
    mutating func readNonNegative() throws(DecodeFailure) -> Double? {
        guard let v = try readOptionalDouble() else { return nil }
        guard v >= 0 else { throw DecodeFailure(field: "", reason: .invalidValue, detail: "must not be negative, got \(v)") }
        return v
    }

    /// A date-time string (see ``LocalDateTime``) as epoch ms; null is nil.
    mutating func readDateTime(offsetSeconds: Int) throws(DecodeFailure) -> Int64? {
        if try consumeNull() { return nil }
        let span = try readStringSpan()
        if !span.escaped {
            // Read in place (a date has no escapes); only a failure or an escaped date makes more.
            let raw = withSpanStart(span) { p, _ in UnsafeRawBufferPointer(start: p, count: span.end &- span.start) }
            if let ms = LocalDateTime.epochMillis(raw, defaultOffsetSeconds: offsetSeconds) { return ms }
            throw Self.notADate(raw)
        }
        let bytes = try unescaped(span)
        if let ms = bytes.withUnsafeBytes({ LocalDateTime.epochMillis($0, defaultOffsetSeconds: offsetSeconds) }) { return ms }
        throw bytes.withUnsafeBytes { Self.notADate($0) }
    }

    private static func notADate(_ raw: UnsafeRawBufferPointer) -> DecodeFailure {
        DecodeFailure(
            field: "", reason: .invalidValue,
            detail: "expected yyyy-MM-ddTHH:mm:ss[.fff][Z|±HH:mm], got \(String(decoding: raw.prefix(40), as: UTF8.self))")
    }
}

/// Failure for a required field that never appeared (or was null).
func missing(_ field: String) -> DecodeFailure {
    DecodeFailure(field: field, reason: .missingField, detail: "required field is missing or null")
}

func invalid(_ field: String, _ detail: String) -> DecodeFailure {
    DecodeFailure(field: field, reason: .invalidValue, detail: detail)
}
