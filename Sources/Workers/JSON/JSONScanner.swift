/// A byte-level JSON reader that the stream decoders drive directly.
///
/// Why not `JSONDecoder`: it builds a tree of boxed values and a dictionary per object, and ran 4x
/// slower than pydantic on the Upbit ticker. This scanner reads the bytes once, in place: keys are
/// matched as byte spans (``KeyTable``), unknown values are skipped without materialising them,
/// numbers are parsed from digits, and only the strings a decoder keeps become `String`s.
///
/// Safety: every read is bounds-checked against `count` (hostile input), nesting is limited by
/// ``DecodeLimits/maxDepth`` and array length by ``DecodeLimits/maxArrayElements``. Errors are
/// ``DecodeFailure`` values with an empty field path; decoders prefix the path while unwinding.
///
/// The pointer is only valid inside the `withUnsafeBytes` closure that created the scanner;
/// ``JSONScanner/withScanner(_:limits:_:)`` is the only way to make one.
struct JSONScanner {
    private let base: UnsafeRawPointer
    let count: Int
    private(set) var pos: Int = 0
    private var depth: Int = 0
    let limits: DecodeLimits

    private init(base: UnsafeRawPointer, count: Int, limits: DecodeLimits) {
        self.base = base
        self.count = count
        self.limits = limits
    }

    /// Runs `body` with a scanner over `bytes`, after checking the size limit; also checks that
    /// nothing but whitespace follows what `body` read.
    static func withScanner<R>(
        _ bytes: [UInt8], limits: DecodeLimits, _ body: (inout JSONScanner) throws(DecodeFailure) -> R
    ) throws(DecodeFailure) -> R {
        try withScanner(bytes[...], limits: limits, body)
    }

    /// ``withScanner(_:limits:_:)`` over a slice; positions count from the slice's start.
    static func withScanner<R>(
        _ bytes: ArraySlice<UInt8>, limits: DecodeLimits, _ body: (inout JSONScanner) throws(DecodeFailure) -> R
    ) throws(DecodeFailure) -> R {
        guard bytes.count <= limits.maxBytes else {
            throw DecodeFailure(field: "$", reason: .tooLarge, detail: "\(bytes.count) bytes > limit \(limits.maxBytes)")
        }
        let result: Result<R, DecodeFailure> = bytes.withUnsafeBytes { raw in
            guard let base = raw.baseAddress, raw.count > 0 else {
                return .failure(DecodeFailure(field: "$", reason: .emptyValue, detail: "empty value"))
            }
            var scanner = JSONScanner(base: base, count: raw.count, limits: limits)
            // Some WebSocket clients prefix binary frames with a UTF-8 byte-order mark.
            if raw.count >= 3, raw[0] == 0xEF, raw[1] == 0xBB, raw[2] == 0xBF { scanner.pos = 3 }
            do throws(DecodeFailure) {
                let value = try body(&scanner)
                scanner.skipWhitespace()
                if scanner.pos != scanner.count {
                    throw scanner.syntax("unexpected data after the JSON value")
                }
                return .success(value)
            } catch {
                // A failure nobody attributed to a field is about the value as a whole.
                var rooted = error
                if rooted.field.isEmpty { rooted.field = "$" }
                return .failure(rooted)
            }
        }
        return try result.get()
    }

    // MARK: Bytes

    /// The byte at `i` (< `count`).
    @inline(__always)
    func byte(_ i: Int) -> UInt8 { base.load(fromByteOffset: i, as: UInt8.self) }

    @inline(__always)
    mutating func skipWhitespace() {
        while pos < count {
            let b = byte(pos)
            if b > 0x20 { return }  // the common case: no whitespace between tokens
            // space, \n, \r, \t
            if b == 0x20 || b == 0x0A || b == 0x0D || b == 0x09 { pos += 1 } else { return }
        }
    }

    func syntax(_ message: String) -> DecodeFailure {
        DecodeFailure(field: "", reason: .malformedJSON, detail: "\(message) at byte \(pos)")
    }

    func wrongType(_ expected: String) -> DecodeFailure {
        let found: String
        if pos < count {
            switch byte(pos) {
            case UInt8(ascii: "{"): found = "object"
            case UInt8(ascii: "["): found = "array"
            case UInt8(ascii: "\""): found = "string"
            case UInt8(ascii: "t"), UInt8(ascii: "f"): found = "boolean"
            case UInt8(ascii: "n"): found = "null"
            default: found = "number"
            }
        } else {
            found = "end of input"
        }
        return DecodeFailure(field: "", reason: .wrongType, detail: "expected \(expected), found \(found)")
    }

    /// The next non-whitespace byte, without consuming it.
    @inline(__always)
    mutating func peek() throws(DecodeFailure) -> UInt8 {
        skipWhitespace()
        guard pos < count else { throw syntax("unexpected end of input") }
        return byte(pos)
    }

    // MARK: Structure

    /// True if the next value is `null` (consumed); false otherwise (nothing consumed).
    @inline(__always)
    mutating func consumeNull() throws(DecodeFailure) -> Bool {
        guard try peek() == UInt8(ascii: "n") else { return false }
        try literal("null")
        return true
    }

    private mutating func literal(_ text: StaticString) throws(DecodeFailure) {
        let n = text.utf8CodeUnitCount
        guard count - pos >= n else { throw syntax("truncated literal") }
        let p = text.utf8Start
        for i in 0..<n where byte(pos + i) != p[i] {
            throw syntax("invalid literal")
        }
        pos += n
    }

    private mutating func enter() throws(DecodeFailure) {
        depth += 1
        if depth > limits.maxDepth {
            throw DecodeFailure(field: "", reason: .tooDeep, detail: "nesting deeper than \(limits.maxDepth)")
        }
    }

    /// Consumes `{`. Then call ``nextKey(_:)`` until it returns nil.
    mutating func beginObject() throws(DecodeFailure) {
        guard try peek() == UInt8(ascii: "{") else { throw wrongType("object") }
        pos += 1
        try enter()
    }

    /// Reads the next key and its `:`; nil after the closing `}`. `first` starts true.
    mutating func nextKey(_ first: inout Bool) throws(DecodeFailure) -> JSONSpan? {
        guard try openKey(&first) else { return nil }
        let key = try readStringSpan()
        guard try peek() == UInt8(ascii: ":") else { throw syntax("expected ':'") }
        pos += 1
        return key
    }

    /// Consumes the `,` before a key (unless `first`), leaving the scanner at the key's opening
    /// quote: true; or consumes the closing `}`: false.
    @inline(__always)
    mutating func openKey(_ first: inout Bool) throws(DecodeFailure) -> Bool {
        var b = try peek()
        if b == UInt8(ascii: "}") {
            pos &+= 1
            depth &-= 1
            return false
        }
        if !first {
            guard b == UInt8(ascii: ",") else { throw syntax("expected ',' or '}'") }
            pos &+= 1
            b = try peek()
        }
        first = false
        guard b == UInt8(ascii: "\"") else { throw syntax("expected a key") }
        return true
    }

    /// Moves past a key the caller matched (`end`: just after its closing quote) and its `:`.
    @inline(__always)
    mutating func skipKey(to end: Int) throws(DecodeFailure) {
        pos = end
        guard try peek() == UInt8(ascii: ":") else { throw syntax("expected ':'") }
        pos &+= 1
    }

    /// Moves `n` bytes on (past bytes the caller has checked).
    @inline(__always)
    mutating func skip(_ n: Int) { pos &+= n }

    /// Moves to `position` (past bytes the caller has checked).
    @inline(__always)
    mutating func move(to position: Int) { pos = position }

    /// Consumes `[`. Then call ``nextElement(_:)`` until it returns false.
    mutating func beginArray() throws(DecodeFailure) {
        guard try peek() == UInt8(ascii: "[") else { throw wrongType("array") }
        pos += 1
        try enter()
    }

    /// True if another element follows (positioned at it); false after the closing `]`.
    mutating func nextElement(_ first: inout Bool) throws(DecodeFailure) -> Bool {
        let b = try peek()
        if b == UInt8(ascii: "]") {
            pos += 1
            depth -= 1
            return false
        }
        if !first {
            guard b == UInt8(ascii: ",") else { throw syntax("expected ',' or ']'") }
            pos += 1
            _ = try peek()
        }
        first = false
        return true
    }

    /// Skips one value of any type, checking its syntax. Recursion is bounded by `maxDepth`.
    mutating func skipValue() throws(DecodeFailure) {
        switch try peek() {
        case UInt8(ascii: "{"):
            try beginObject()
            var first = true
            while try nextKey(&first) != nil { try skipValue() }
        case UInt8(ascii: "["):
            try beginArray()
            var first = true
            var n = 0
            while try nextElement(&first) {
                n += 1
                if n > limits.maxArrayElements { throw tooManyElements() }
                try skipValue()
            }
        case UInt8(ascii: "\""):
            _ = try readStringSpan()
        case UInt8(ascii: "t"): try literal("true")
        case UInt8(ascii: "f"): try literal("false")
        case UInt8(ascii: "n"): try literal("null")
        default:
            _ = try readNumberParts()
        }
    }

    func tooManyElements() -> DecodeFailure {
        DecodeFailure(field: "", reason: .tooLarge, detail: "more than \(limits.maxArrayElements) array elements")
    }

    // MARK: Strings

    /// Reads a string token and returns where its content lies (quotes excluded). Escapes are
    /// validated but not decoded; control characters are rejected as JSON requires.
    mutating func readStringSpan() throws(DecodeFailure) -> JSONSpan {
        guard try peek() == UInt8(ascii: "\"") else { throw wrongType("string") }
        pos += 1
        let start = pos
        var escaped = false
        // The high bits of every byte of the content: zero for ASCII, which needs no UTF-8 check.
        var high: UInt64 = 0
        // Sixteen bytes (two words) a turn over long text such as URLs, one test for both; the
        // word loop below then finds which byte stopped it.
        while pos &+ 16 <= count {
            let a = base.loadUnaligned(fromByteOffset: pos, as: UInt64.self)
            let b = base.loadUnaligned(fromByteOffset: pos &+ 8, as: UInt64.self)
            if JSONSpecialBytes.mask(a) | JSONSpecialBytes.mask(b) != 0 { break }
            high |= a | b
            pos &+= 16
        }
        while true {
            // Eight bytes at a time while none needs attention ('"', '\\' or a control character):
            // URLs and names are long, and string scanning was the largest share of decode time.
            // A word with one goes straight to its first (the lowest flag is exact), so a short
            // key costs one word, not a word per byte up to its closing quote.
            while pos &+ 8 <= count {
                let word = base.loadUnaligned(fromByteOffset: pos, as: UInt64.self)
                let mask = JSONSpecialBytes.mask(word)
                if mask != 0 {
                    let before = mask.trailingZeroBitCount &>> 3
                    high |= UInt64(littleEndian: word) & ((1 &<< UInt64(truncatingIfNeeded: before &* 8)) &- 1)
                    pos &+= before
                    break
                }
                high |= word
                pos &+= 8
            }
            guard pos < count else { break }
            let b = byte(pos)
            if b == UInt8(ascii: "\"") {
                let span = JSONSpan(start: start, end: pos, escaped: escaped, ascii: high & 0x8080_8080_8080_8080 == 0)
                pos += 1
                return span
            }
            if b == UInt8(ascii: "\\") {
                escaped = true
                guard pos + 1 < count else { break }
                switch byte(pos + 1) {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"),
                    UInt8(ascii: "f"), UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                    pos += 2
                case UInt8(ascii: "u"):
                    guard pos + 5 < count else { throw syntax("truncated \\u escape") }
                    for i in 2...5 where hexValue(byte(pos + i)) == nil {
                        throw syntax("invalid \\u escape")
                    }
                    pos += 6
                default:
                    throw syntax("invalid escape")
                }
                continue
            }
            if b < 0x20 { throw syntax("control character in string") }
            high |= UInt64(b)
            pos += 1
        }
        throw syntax("unterminated string")
    }

    /// Reads a string value as a Swift `String` (escapes decoded, UTF-8 validated).
    mutating func readString() throws(DecodeFailure) -> String {
        let span = try readStringSpan()
        return try string(span)
    }

    /// The decoded text of a span. Invalid UTF-8 is a failure, not a replacement character:
    /// the value would not round-trip.
    func string(_ span: JSONSpan) throws(DecodeFailure) -> String {
        if !span.escaped {
            let raw = UnsafeBufferPointer(start: (base + span.start).assumingMemoryBound(to: UInt8.self), count: span.end - span.start)
            // ASCII (codes, names, most text) cannot be invalid: no validation pass, which for a
            // short string costs more than the copy (it looks up generic metadata on every call).
            if span.ascii || Self.isASCII(raw) { return String(decoding: raw, as: UTF8.self) }
            guard let s = String(validating: raw, as: UTF8.self) else {
                throw DecodeFailure(field: "", reason: .malformedJSON, detail: "invalid UTF-8 in string")
            }
            return s
        }
        let bytes = try unescaped(span)
        guard let s = String(validating: bytes, as: UTF8.self) else {
            throw DecodeFailure(field: "", reason: .malformedJSON, detail: "invalid UTF-8 in string")
        }
        return s
    }

    /// No byte of `bytes` is above 0x7F (eight at a time, then the rest).
    @inline(__always)
    static func isASCII(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let start = bytes.baseAddress else { return true }
        var i = 0
        var high: UInt64 = 0
        while i &+ 8 <= bytes.count {
            high |= UnsafeRawPointer(start + i).loadUnaligned(as: UInt64.self)
            i &+= 8
        }
        while i < bytes.count {
            high |= UInt64(start[i])
            i &+= 1
        }
        return high & 0x8080_8080_8080_8080 == 0
    }

    /// A copy of the whole input, for ``readText(into:)`` (see ``TextBuffer``).
    func messageText() throws(DecodeFailure) -> TextBuffer {
        // Slices are 32-bit: a message of 4 GiB or more is not one of these values.
        guard count < Int(UInt32.max) / 2 else {
            throw DecodeFailure(field: "$", reason: .tooLarge, detail: "\(count) bytes: too large to keep text from")
        }
        return TextBuffer(copying: UnsafeRawBufferPointer(start: base, count: count))
    }

    /// Reads a string value and returns where it lies in `text`, a ``messageText()`` of this
    /// scanner: a string without escapes where it is in the message (checked to be UTF-8), one
    /// with escapes decoded onto its end. No `String` is made.
    mutating func readText(into text: inout TextBuffer) throws(DecodeFailure) -> TextBuffer.Slice {
        let span = try readStringSpan()
        if !span.escaped {
            let n = span.end &- span.start
            guard span.ascii || UTF8Check.isValid(UnsafeBufferPointer(start: (base + span.start).assumingMemoryBound(to: UInt8.self), count: n)) else {
                throw DecodeFailure(field: "", reason: .malformedJSON, detail: "invalid UTF-8 in string")
            }
            return TextBuffer.Slice(start: UInt32(truncatingIfNeeded: span.start), count: UInt32(truncatingIfNeeded: n))
        }
        return try text.append { bytes throws(DecodeFailure) in
            let from = bytes.count
            try unescape(span, into: &bytes)
            guard bytes.withUnsafeBufferPointer({ UTF8Check.isValid(UnsafeBufferPointer(rebasing: $0[from...])) }) else {
                throw DecodeFailure(field: "", reason: .malformedJSON, detail: "invalid UTF-8 in string")
            }
        }
    }

    /// ``readText(into:)``, or nil for JSON `null`.
    mutating func readOptionalText(into text: inout TextBuffer) throws(DecodeFailure) -> TextBuffer.Slice? {
        if try consumeNull() { return nil }
        return try readText(into: &text)
    }

    /// The bytes of a span with escapes decoded (used for escaped keys and strings).
    func unescaped(_ span: JSONSpan) throws(DecodeFailure) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(span.end - span.start)
        try unescape(span, into: &out)
        return out
    }

    /// Appends the bytes of a span with escapes decoded to `out`.
    func unescape(_ span: JSONSpan, into out: inout [UInt8]) throws(DecodeFailure) {
        var i = span.start
        // readStringSpan validated the escapes, so each index below is in bounds.
        while i < span.end {
            let b = byte(i)
            guard b == UInt8(ascii: "\\") else {
                out.append(b)
                i += 1
                continue
            }
            let e = byte(i + 1)
            i += 2
            switch e {
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = hex4(at: i)
                i += 4
                if (0xD800...0xDBFF).contains(scalar) {
                    // A high surrogate must be followed by an escaped low surrogate.
                    guard i + 6 <= span.end, byte(i) == UInt8(ascii: "\\"), byte(i + 1) == UInt8(ascii: "u") else { throw DecodeFailure(field: "", reason: .malformedJSON, detail: "unpaired surrogate") }
                    let low = hex4(at: i + 2)
                    guard (0xDC00...0xDFFF).contains(low) else {
                        throw DecodeFailure(field: "", reason: .malformedJSON, detail: "unpaired surrogate")
                    }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    i += 6
                } else if (0xDC00...0xDFFF).contains(scalar) {
                    throw DecodeFailure(field: "", reason: .malformedJSON, detail: "unpaired surrogate")
                }
                guard let u = Unicode.Scalar(scalar) else {
                    throw DecodeFailure(field: "", reason: .malformedJSON, detail: "invalid \\u escape")
                }
                if let encoded = UTF8.encode(u) { out.append(contentsOf: encoded) }  // always non-nil for a valid scalar
            default: out.append(e)  // " \ /
            }
        }
    }

    private func hex4(at i: Int) -> UInt32 {
        var v: UInt32 = 0
        for k in 0..<4 { v = v << 4 | UInt32(hexValue(byte(i + k)) ?? 0) }
        return v
    }

    /// True if the span's raw bytes equal `literal` (for enum-like values such as `RISE`).
    func spanEquals(_ span: JSONSpan, _ literal: StaticString) -> Bool {
        let n = literal.utf8CodeUnitCount
        guard !span.escaped, span.end &- span.start == n else { return false }
        return ShortBytes.equal(UnsafeRawPointer(base + span.start), UnsafeRawPointer(literal.utf8Start), count: n)
    }

    /// The span's first byte and how many bytes of the input may be read from there (the span,
    /// its closing quote and what follows).
    @inline(__always)
    func withSpanStart<R>(_ span: JSONSpan, _ body: (UnsafeRawPointer, Int) -> R) -> R {
        body(base + span.start, count &- span.start)
    }

    /// Reads a string and hands its raw bytes to `body` without making a `String`
    /// (dates, enums). Escaped strings are unescaped first.
    mutating func withStringBytes<R>(
        _ body: (UnsafeRawBufferPointer) throws(DecodeFailure) -> R
    ) throws(DecodeFailure) -> R {
        let span = try readStringSpan()
        if !span.escaped {
            return try body(UnsafeRawBufferPointer(start: base + span.start, count: span.end - span.start))
        }
        let bytes = try unescaped(span)
        do {
            return try bytes.withUnsafeBytes { raw throws(DecodeFailure) in try body(raw) }
        } catch let e as DecodeFailure {
            throw e
        } catch {
            throw DecodeFailure(field: "", reason: .invalidValue, detail: "\(error)")
        }
    }

    // MARK: Booleans

    mutating func readBool() throws(DecodeFailure) -> Bool {
        switch try peek() {
        case UInt8(ascii: "t"): try literal("true"); return true
        case UInt8(ascii: "f"): try literal("false"); return false
        default: throw wrongType("boolean")
        }
    }

    // MARK: Numbers

    /// Reads a number as the nearest `Double`, exactly (correct rounding).
    ///
    /// Fast path (Clinger): up to 19 significant digits fit a `UInt64`; when the digits are at
    /// most 2^53 and the decimal exponent is within ±22, one IEEE multiplication or division by
    /// an exact power of ten is correctly rounded. Trailing zeros (`10711749229.465390000000`,
    /// `31883000.00000000`) are not digits here: they are deferred and folded into the exponent,
    /// so Upbit's padded values stay on the fast path. Anything else falls back to the standard
    /// library's correctly rounded `Double(Substring)` on the token text.
    mutating func readDouble() throws(DecodeFailure) -> Double {
        let parts = try readNumberParts()
        if !parts.slow, parts.mantissa <= (1 << 53), parts.scale >= -22, parts.scale <= 22 {
            let m = Double(parts.mantissa)
            let v = parts.scale >= 0 ? m * powersOfTen[parts.scale] : m / powersOfTen[-parts.scale]
            return parts.negative ? -v : v
        }
        return try slowDouble(parts)
    }

    private func slowDouble(_ parts: NumberParts) throws(DecodeFailure) -> Double {
        let raw = UnsafeRawBufferPointer(start: base + parts.start, count: parts.end - parts.start)
        let text = String(decoding: raw, as: UTF8.self)
        guard let v = Double(text), v.isFinite else {
            throw DecodeFailure(field: "", reason: .invalidValue, detail: "number out of range: \(text.prefix(40))")
        }
        return v
    }

    /// Reads a number that must be integral: `2000`, `2000.0` and `2.0E3` are all 2000; `2000.5`
    /// is a failure. Limited to ±2^63.
    mutating func readInt() throws(DecodeFailure) -> Int64 {
        let parts = try readNumberParts()
        if !parts.slow {
            var v = parts.mantissa, scale = parts.scale
            // `2000.0` is 20000 × 10^-1: a fraction of zeros is still an integer.
            while scale < 0, v % 10 == 0 {
                v /= 10
                scale += 1
            }
            guard scale >= 0 else {
                throw DecodeFailure(field: "", reason: .wrongType, detail: "expected an integer, found a fraction")
            }
            if scale > 0 {
                guard scale <= 19 else { throw intRange() }
                let (r, o) = v.multipliedReportingOverflow(by: UInt64(powersOfTenInt[scale]))
                guard !o else { throw intRange() }
                v = r
            }
            if parts.negative {
                guard v <= UInt64(Int64.max) + 1 else { throw intRange() }
                return v == UInt64(Int64.max) + 1 ? Int64.min : -Int64(v)
            }
            guard v <= UInt64(Int64.max) else { throw intRange() }
            return Int64(v)
        }
        // More than 19 significant digits (first to last non-zero): at or above 10^19, beyond
        // 64 bits, or below it with a non-zero digit after the point. Never an Int64 (rounding
        // through Double used to accept `4530126966352251392.5`).
        throw DecodeFailure(field: "", reason: .invalidValue, detail: "expected an integer within 64 bits")
    }

    private func intRange() -> DecodeFailure {
        DecodeFailure(field: "", reason: .invalidValue, detail: "integer out of 64-bit range")
    }

    struct NumberParts {
        var negative = false
        var mantissa: UInt64 = 0
        /// value = mantissa × 10^scale
        var scale = 0
        /// Too many digits or a huge exponent: use the slow path.
        var slow = false
        var start = 0
        var end = 0
    }

    /// Scans one JSON number (strict RFC 8259 grammar) into mantissa and decimal exponent.
    ///
    /// The common shape (`-?digits(.digits)?`, at most 19 significant digits) takes one loop that
    /// multiplies every digit in, trailing zeros too; anything else (an exponent, more digits, a
    /// syntax error) is read again from its start by ``readNumberPartsExactly()``, which also
    /// reports the errors.
    @inline(__always)
    mutating func readNumberParts() throws(DecodeFailure) -> NumberParts {
        let first = try peek()
        let start = pos
        var i = pos
        if first == UInt8(ascii: "-") { i &+= 1 }
        var m: UInt64 = 0
        // Digits read, the integer part's `0` and leading zeros of a fraction included: at most
        // 19 keeps the mantissa within 64 bits (a number with more takes the exact path even when
        // fewer of them are significant).
        var digits = 0
        var scale = 0
        // The integer part: one digit `0`, or digits without a leading zero.
        if i < count, byte(i) &- UInt8(ascii: "1") < 9 {
            let n = digitRun(from: i, into: &m)
            digits = n
            i &+= n
        } else if i < count, byte(i) == UInt8(ascii: "0"), !(i &+ 1 < count && isDigit(byte(i &+ 1))) {
            digits = 1
            i &+= 1
        } else {
            return try readNumberPartsExactly()
        }
        if i < count, byte(i) == UInt8(ascii: ".") {
            i &+= 1
            guard i < count, isDigit(byte(i)) else { return try readNumberPartsExactly() }
            let n = digitRun(from: i, into: &m)
            digits &+= n
            scale = -n
            i &+= n
        }
        guard digits <= 19, !(i < count && byte(i) | 0x20 == UInt8(ascii: "e")) else { return try readNumberPartsExactly() }
        pos = i
        return NumberParts(negative: first == UInt8(ascii: "-"), mantissa: m, scale: m == 0 ? 0 : scale, slow: false, start: start, end: i)
    }

    /// Reads the run of digits at `start` (one at least: the callers checked) into `m` (`m` becomes
    /// `m × 10^n` plus the run, wrapping: the caller checks the count) and returns its length `n`.
    /// Eight bytes a turn: one load, a mask of the bytes that are not digits, and the run's first
    /// up-to-eight digits combined with three multiplications (the SWAR conversion simdjson uses),
    /// instead of a multiplication, a load and a comparison per digit. The input's last bytes one
    /// at a time.
    @inline(__always)
    private func digitRun(from start: Int, into m: inout UInt64) -> Int {
        var i = start
        // One digit (a fraction's `.0`, `.5`): cheaper alone than a word's conversion.
        if i &+ 1 < count, !isDigit(byte(i &+ 1)) {
            m = m &* 10 &+ UInt64(byte(i) &- 0x30)
            return 1
        }
        while i &+ 8 <= count {
            // Each byte's value as a digit (0...9 for a digit); a byte is not a digit when its high
            // nibble is set or adding 6 carries into bit 4. A carry out of a byte only happens
            // for a byte that is not a digit, so the lowest flag is exact.
            let x = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: i, as: UInt64.self)) ^ 0x3030_3030_3030_3030
            let notDigit = (x & 0xF0F0_F0F0_F0F0_F0F0) | ((x &+ 0x0606_0606_0606_0606) & 0x1010_1010_1010_1010)
            let n = notDigit == 0 ? 8 : notDigit.trailingZeroBitCount &>> 3
            if n == 0 { return i &- start }
            // The run's digits in the high bytes, zeros below: the same value.
            let run = x &<< UInt64(truncatingIfNeeded: (8 &- n) &* 8)
            let value = Self.eightDigitsValue(run)
            m = m == 0 ? value : m &* powersOfTenInt.withUnsafeBufferPointer { $0[n] } &+ value
            i &+= n
            if n < 8 { return i &- start }
        }
        while i < count, isDigit(byte(i)) {
            m = m &* 10 &+ UInt64(byte(i) &- 0x30)
            i &+= 1
        }
        return i &- start
    }

    /// The value of eight digit values (0...9 each, the first in the lowest byte).
    @inline(__always)
    private static func eightDigitsValue(_ v: UInt64) -> UInt64 {
        let pairs = (v &* 2561) &>> 8 & 0x00FF_00FF_00FF_00FF
        let quads = (pairs &* 6_553_601) &>> 16 & 0x0000_FFFF_0000_FFFF
        return (quads &* 42_949_672_960_001) &>> 32
    }

    /// ``readNumberParts()`` for every number: digits past the 19th, exponents, and the errors.
    /// Trailing zeros are kept out of the mantissa (folded into the exponent).
    private mutating func readNumberPartsExactly() throws(DecodeFailure) -> NumberParts {
        var p = NumberParts()
        let first = try peek()
        p.start = pos
        if first == UInt8(ascii: "-") {
            p.negative = true
            pos += 1
        }
        guard pos < count else { throw syntax("truncated number") }
        var sig = 0  // significant digits held in mantissa
        var pendingZeros = 0  // zeros seen after the last non-zero digit, not yet in mantissa

        @inline(__always)
        func push(_ d: UInt64, _ p: inout NumberParts) {
            if p.mantissa == 0 {
                p.mantissa = d
                sig = 1
            } else {
                let add = pendingZeros + 1
                if sig + add > 19 {
                    p.slow = true
                } else {
                    p.mantissa = p.mantissa &* powersOfTenInt[add] &+ d
                    sig += add
                }
            }
            pendingZeros = 0
        }

        let lead = byte(pos)
        if lead == UInt8(ascii: "0") {
            pos += 1
            if pos < count, isDigit(byte(pos)) { throw syntax("leading zero in number") }
        } else if lead >= UInt8(ascii: "1") && lead <= UInt8(ascii: "9") {
            while pos < count {
                let b = byte(pos)
                guard isDigit(b) else { break }
                if b == UInt8(ascii: "0") { pendingZeros += 1 } else { push(UInt64(b &- 0x30), &p) }
                pos += 1
            }
            // Integer-part zeros stay pending: a fraction may follow and continue the digits.
        } else {
            throw first == UInt8(ascii: "-") ? syntax("invalid number") : wrongTypeOrSyntax(first)
        }
        if pos < count, byte(pos) == UInt8(ascii: ".") {
            pos += 1
            guard pos < count, isDigit(byte(pos)) else { throw syntax("digit expected after '.'") }
            while pos < count {
                let b = byte(pos)
                guard isDigit(b) else { break }
                p.scale -= 1
                if b == UInt8(ascii: "0") {
                    if p.mantissa != 0 { pendingZeros += 1 }
                } else {
                    push(UInt64(b &- 0x30), &p)
                }
                pos += 1
            }
        }
        // Trailing zeros were never multiplied into the mantissa: fold them into the exponent.
        p.scale += pendingZeros
        pendingZeros = 0
        if pos < count, byte(pos) | 0x20 == UInt8(ascii: "e") {
            pos += 1
            var expNegative = false
            if pos < count, byte(pos) == UInt8(ascii: "+") || byte(pos) == UInt8(ascii: "-") {
                expNegative = byte(pos) == UInt8(ascii: "-")
                pos += 1
            }
            guard pos < count, isDigit(byte(pos)) else { throw syntax("digit expected in exponent") }
            var e = 0
            while pos < count {
                let b = byte(pos)
                guard isDigit(b) else { break }
                if e < 100_000 { e = e * 10 + Int(b &- 0x30) } else { p.slow = true }
                pos += 1
            }
            p.scale += expNegative ? -e : e
        }
        if p.mantissa == 0 { p.scale = 0 }
        p.end = pos
        return p
    }

    private func wrongTypeOrSyntax(_ b: UInt8) -> DecodeFailure {
        switch b {
        case UInt8(ascii: "{"), UInt8(ascii: "["), UInt8(ascii: "\""), UInt8(ascii: "t"), UInt8(ascii: "f"), UInt8(ascii: "n"):
            return wrongType("number")
        default:
            return syntax("unexpected character")
        }
    }
}

/// Where a string token's content lies in the input.
struct JSONSpan {
    var start: Int
    var end: Int
    /// Contains backslash escapes (must be decoded before use).
    var escaped: Bool
    /// Every byte is ASCII (escapes as written): valid UTF-8 without a check.
    var ascii: Bool = false
}

@inline(__always) private func isDigit(_ b: UInt8) -> Bool { b &- 0x30 < 10 }

private func hexValue(_ b: UInt8) -> UInt8? {
    switch b {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): return b - 0x30
    case UInt8(ascii: "a")...UInt8(ascii: "f"): return b - 0x61 + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): return b - 0x41 + 10
    default: return nil
    }
}

/// 10^0 … 10^22, all exactly representable as Double (the JSON reader and writer).
let powersOfTen: [Double] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
]

/// 10^0 … 10^19 as UInt64 (the JSON reader and writer).
let powersOfTenInt: [UInt64] = [
    1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000, 1_000_000_000, 10_000_000_000,
    100_000_000_000, 1_000_000_000_000, 10_000_000_000_000, 100_000_000_000_000, 1_000_000_000_000_000,
    10_000_000_000_000_000, 100_000_000_000_000_000, 1_000_000_000_000_000_000, 10_000_000_000_000_000_000,
]
