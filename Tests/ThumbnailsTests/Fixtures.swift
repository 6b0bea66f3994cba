// Test images made by the tests themselves: PNGs (Thumbnails.StoredPNG), JPEG and WebP made
// from those PNGs by libvips (through the renderer, with a large box so nothing shrinks),
// and EXIF segments (orientation, GPS) spliced into JPEGs by hand.
import Thumbnails

enum Fixtures {
    // MARK: PNG

    /// An 8-bit RGB PNG with a gradient, so encoders see real content. Deflate uses stored
    /// blocks (no compression), which every decoder must accept.
    /// With `alpha`, RGBA whose opacity falls from left to right.
    static func png(width: Int, height: Int, alpha: Bool = false) -> [UInt8] {
        var raw: [UInt8] = []
        raw.reserveCapacity((width * (alpha ? 4 : 3) + 1) * height)
        for y in 0..<height {
            raw.append(0)  // filter: none
            for x in 0..<width {
                raw.append(UInt8(truncatingIfNeeded: x * 255 / max(1, width - 1)))
                raw.append(UInt8(truncatingIfNeeded: y * 255 / max(1, height - 1)))
                raw.append(UInt8(truncatingIfNeeded: (x + y) & 0xff))
                if alpha { raw.append(UInt8(truncatingIfNeeded: 255 - x * 255 / max(1, width - 1))) }
            }
        }
        return StoredPNG.container(width: width, height: height, colourType: alpha ? 6 : 2, idat: StoredPNG.zlibStored(raw))
    }

    /// A PNG of one colour: RGBA if `pixel` has 4 values, RGB if 3.
    static func solidPNG(width: Int, height: Int, pixel: [UInt8]) -> [UInt8] {
        var raw: [UInt8] = []
        for _ in 0..<height {
            raw.append(0)
            for _ in 0..<width { raw += pixel }
        }
        return StoredPNG.container(width: width, height: height, colourType: pixel.count == 4 ? 6 : 2, idat: StoredPNG.zlibStored(raw))
    }

    /// A decompression bomb: the header declares `width` x `height` RGB pixels, the data is a
    /// few bytes. A decoder that trusts the header would allocate width*height*3 bytes.
    static func pngBomb(width: Int = 50_000, height: Int = 50_000) -> [UInt8] {
        // A valid zlib stream of one (all zero, filter none) scanline; the rest is missing.
        StoredPNG.container(width: width, height: height, colourType: 2, idat: StoredPNG.zlibStored([UInt8](repeating: 0, count: 1024)))
    }

    static func be32(_ v: Int) -> [UInt8] {
        [UInt8((v >> 24) & 0xff), UInt8((v >> 16) & 0xff), UInt8((v >> 8) & 0xff), UInt8(v & 0xff)]
    }

    // MARK: JPEG and WebP (encoded by libvips from a PNG, at full size)

    static func jpeg(width: Int, height: Int, quality: Int = 90) -> [UInt8] {
        encode(png(width: width, height: height), width: width, height: height, format: .jpeg, quality: quality)
    }

    static func webp(width: Int, height: Int) -> [UInt8] {
        encode(png(width: width, height: height), width: width, height: height, format: .webp, quality: 90)
    }

    static func encode(
        _ source: [UInt8], width: Int, height: Int, format: ThumbnailFormat, quality: Int, upscale: Bool = false
    ) -> [UInt8] {
        let spec = ThumbnailSpec(
            name: "fixture", width: width, height: height, mode: .fit, format: format, quality: quality, allowUpscale: upscale)
        var limits = RenderLimits()
        limits.maxInputBytes = 1 << 30
        // Fixture creation failing is a broken test set-up, not a test result.
        return try! ThumbnailRenderer(limits: limits).render(source, spec: spec).bytes
    }

    // MARK: EXIF

    /// `jpeg` with an APP1 EXIF segment inserted after SOI: IFD0 holds Orientation and,
    /// if `gps` is set, a GPS IFD with latitude/longitude (big-endian TIFF).
    static func withExif(_ jpeg: [UInt8], orientation: Int, gps: Bool = false) -> [UInt8] {
        precondition(jpeg.starts(with: [0xFF, 0xD8]))
        func be16(_ v: Int) -> [UInt8] { [UInt8((v >> 8) & 0xff), UInt8(v & 0xff)] }
        func entry(_ tag: Int, _ type: Int, _ count: Int, _ value: [UInt8]) -> [UInt8] {
            be16(tag) + be16(type) + be32(count) + value + [UInt8](repeating: 0, count: 4 - value.count)
        }
        var tiff: [UInt8] = [0x4D, 0x4D, 0x00, 0x2A] + be32(8)  // "MM", 42, IFD0 at 8
        let ifd0Count = gps ? 2 : 1
        let ifd0Size = 2 + ifd0Count * 12 + 4
        let gpsOffset = 8 + ifd0Size
        tiff += be16(ifd0Count)
        tiff += entry(0x0112, 3, 1, be16(orientation))  // Orientation, SHORT
        if gps { tiff += entry(0x8825, 4, 1, be32(gpsOffset)) }  // GPSInfo IFD pointer, LONG
        tiff += be32(0)  // no IFD1
        if gps {
            let gpsCount = 4
            let dataOffset = gpsOffset + 2 + gpsCount * 12 + 4
            tiff += be16(gpsCount)
            tiff += entry(0x0001, 2, 2, Array("N\0".utf8))  // GPSLatitudeRef
            tiff += entry(0x0002, 5, 3, be32(dataOffset))  // GPSLatitude, 3 RATIONALs
            tiff += entry(0x0003, 2, 2, Array("E\0".utf8))  // GPSLongitudeRef
            tiff += entry(0x0004, 5, 3, be32(dataOffset + 24))  // GPSLongitude
            tiff += be32(0)
            for value in [52, 22, 31, 4, 53, 52] { tiff += be32(value) + be32(1) }
        }
        let payload = Array("Exif\0\0".utf8) + tiff
        let app1 = [0xFF, 0xE1] + be16(payload.count + 2) + payload
        return [0xFF, 0xD8] + app1 + jpeg[2...]
    }

    // MARK: Inspecting output

    /// Width and height from a JPEG's SOF marker, parsed independently of libvips.
    static func jpegSize(_ jpeg: [UInt8]) -> (width: Int, height: Int)? {
        var i = 2
        while i + 9 < jpeg.count {
            guard jpeg[i] == 0xFF else { return nil }
            let marker = jpeg[i + 1]
            let length = Int(jpeg[i + 2]) << 8 | Int(jpeg[i + 3])
            if (0xC0...0xCF).contains(marker), marker != 0xC4, marker != 0xC8, marker != 0xCC {
                let height = Int(jpeg[i + 5]) << 8 | Int(jpeg[i + 6])
                let width = Int(jpeg[i + 7]) << 8 | Int(jpeg[i + 8])
                return (width, height)
            }
            i += 2 + length
        }
        return nil
    }

    /// Number of colour components in a JPEG's SOF marker (3 for RGB/YCbCr).
    static func jpegComponents(_ jpeg: [UInt8]) -> Int? {
        var i = 2
        while i + 9 < jpeg.count, jpeg[i] == 0xFF {
            let marker = jpeg[i + 1]
            if (0xC0...0xCF).contains(marker), marker != 0xC4, marker != 0xC8, marker != 0xCC { return Int(jpeg[i + 9]) }
            i += 2 + (Int(jpeg[i + 2]) << 8 | Int(jpeg[i + 3]))
        }
        return nil
    }

    /// The APPn markers (0xE0...0xEF) present before the image data: EXIF is APP1, ICC APP2.
    static func jpegAppMarkers(_ jpeg: [UInt8]) -> [UInt8] {
        var markers: [UInt8] = []
        var i = 2
        while i + 3 < jpeg.count, jpeg[i] == 0xFF {
            let marker = jpeg[i + 1]
            if marker == 0xDA { break }  // start of scan
            if (0xE0...0xEF).contains(marker) { markers.append(marker) }
            i += 2 + (Int(jpeg[i + 2]) << 8 | Int(jpeg[i + 3]))
        }
        return markers
    }

    static func contains(_ haystack: [UInt8], _ needle: String) -> Bool {
        let n = Array(needle.utf8)
        guard haystack.count >= n.count else { return false }
        for start in 0...(haystack.count - n.count) where haystack[start] == n[0] {
            if Array(haystack[start..<start + n.count]) == n { return true }
        }
        return false
    }
}
