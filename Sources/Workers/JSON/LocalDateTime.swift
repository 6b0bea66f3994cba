/// Parses the upstream date-times (`yyyy-MM-dd'T'HH:mm:ss` with optional fraction of any length,
/// optional `Z` or `±HH:mm`) straight from bytes into epoch milliseconds.
///
/// Dates without a zone are local time at `defaultOffsetSeconds` (Korean time, +09:00, for the
/// upstream APIs). No Foundation formatter: they are slow, locale-dependent and not Sendable.
enum LocalDateTime {
    static func epochMillis(_ raw: UnsafeRawBufferPointer, defaultOffsetSeconds: Int) -> Int64? {
        let n = raw.count
        guard n >= 19 else { return nil }
        func digits(_ from: Int, _ len: Int) -> Int? {
            var v = 0
            for i in from..<(from + len) {
                let d = raw[i] &- 0x30
                guard d < 10 else { return nil }
                v = v * 10 + Int(d)
            }
            return v
        }
        guard raw[4] == UInt8(ascii: "-"), raw[7] == UInt8(ascii: "-"),
            raw[10] == UInt8(ascii: "T") || raw[10] == UInt8(ascii: " "),
            raw[13] == UInt8(ascii: ":"), raw[16] == UInt8(ascii: ":"),
            let year = digits(0, 4), let month = digits(5, 2), let day = digits(8, 2),
            let hour = digits(11, 2), let minute = digits(14, 2), let second = digits(17, 2),
            (1...12).contains(month), day >= 1, day <= daysInMonth(year, month),
            hour < 24, minute < 60, second < 60
        else { return nil }
        var i = 19
        var millis = 0
        if i < n, raw[i] == UInt8(ascii: ".") {
            i += 1
            var scale = 100
            let fracStart = i
            while i < n, raw[i] &- 0x30 < 10 {
                millis += Int(raw[i] &- 0x30) * scale
                scale /= 10
                i += 1
            }
            guard i > fracStart, i - fracStart <= 9 else { return nil }
        }
        var offset = defaultOffsetSeconds
        if i < n {
            if raw[i] == UInt8(ascii: "Z"), i + 1 == n {
                offset = 0
            } else if raw[i] == UInt8(ascii: "+") || raw[i] == UInt8(ascii: "-"), n - i == 6,
                raw[i + 3] == UInt8(ascii: ":"), let oh = digits(i + 1, 2), let om = digits(i + 4, 2), oh < 24, om < 60
            {
                offset = (oh * 3600 + om * 60) * (raw[i] == UInt8(ascii: "-") ? -1 : 1)
            } else {
                return nil
            }
        }
        let days = daysFromCivil(year, month, day)
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset
        return Int64(seconds) * 1000 + Int64(millis)
    }

    /// Days since 1970-01-01 (Howard Hinnant's algorithm, proleptic Gregorian).
    static func daysFromCivil(_ y0: Int, _ m: Int, _ d: Int) -> Int {
        let y = m <= 2 ? y0 - 1 : y0
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (m + 9) % 12
        let doy = (153 * mp + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    static func daysInMonth(_ y: Int, _ m: Int) -> Int {
        switch m {
        case 2: return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    /// `yyyy-MM-dd'T'HH:mm:ss.SSS'Z'` for an epoch-ms value (outputs are always UTC).
    static func isoUTC(_ millis: Int64) -> String {
        let ms = Int(((millis % 1000) + 1000) % 1000)
        let totalSeconds = Int((millis - Int64(ms)) / 1000)
        var days = totalSeconds / 86_400
        var secs = totalSeconds % 86_400
        if secs < 0 { secs += 86_400; days -= 1 }
        let (y, m, d) = civilFromDays(days)
        func pad(_ v: Int, _ w: Int) -> String {
            let s = String(v)
            return s.count >= w ? s : String(repeating: "0", count: w - s.count) + s
        }
        return "\(pad(y, 4))-\(pad(m, 2))-\(pad(d, 2))T\(pad(secs / 3600, 2)):\(pad(secs / 60 % 60, 2)):\(pad(secs % 60, 2)).\(pad(ms, 3))Z"
    }

    static func civilFromDays(_ z0: Int) -> (Int, Int, Int) {
        let z = z0 + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let y = yoe + era * 400
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (m <= 2 ? y + 1 : y, m, d)
    }
}
