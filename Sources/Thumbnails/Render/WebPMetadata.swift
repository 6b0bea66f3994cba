/// Removes metadata chunks from an encoded WebP file.
///
/// libvips 8.14.1's webpsave writes an EXIF chunk (resolution, orientation, …) even with
/// "strip" set and no EXIF on the image (checked with `vips webpsave --strip`), so the renderer
/// rewrites the RIFF container: EXIF, XMP and ICCP chunks are dropped, the VP8X flags that
/// announce them are cleared and the RIFF size is fixed. Pixel data is copied unchanged.
enum WebPMetadata {
    /// `webp` without EXIF, XMP or ICC chunks; input that is not a well-formed WebP
    /// container comes back unchanged.
    static func strip(_ webp: [UInt8]) -> [UInt8] {
        guard webp.count >= 12,
              webp[0..<4].elementsEqual("RIFF".utf8),
              webp[8..<12].elementsEqual("WEBP".utf8)
        else { return webp }

        var out: [UInt8] = Array(webp[0..<12])
        out.reserveCapacity(webp.count)
        var offset = 12
        var vp8xFlagsAt: Int?
        while offset + 8 <= webp.count {
            let fourCC = String(decoding: webp[offset..<offset + 4], as: UTF8.self)
            let size = Int(webp[offset + 4]) | Int(webp[offset + 5]) << 8 | Int(webp[offset + 6]) << 16 | Int(webp[offset + 7]) << 24
            let padded = size + (size & 1)
            guard offset + 8 + padded <= webp.count else { return webp }  // malformed: leave it
            if !["EXIF", "XMP ", "ICCP"].contains(fourCC) {
                if fourCC == "VP8X" { vp8xFlagsAt = out.count + 8 }
                out += webp[offset..<offset + 8 + padded]
            }
            offset += 8 + padded
        }
        if let at = vp8xFlagsAt {
            out[at] &= ~(0x20 | 0x08 | 0x04)  // ICC, EXIF, XMP present
        }
        let riffSize = out.count - 8
        out[4] = UInt8(riffSize & 0xff)
        out[5] = UInt8((riffSize >> 8) & 0xff)
        out[6] = UInt8((riffSize >> 16) & 0xff)
        out[7] = UInt8((riffSize >> 24) & 0xff)
        return out
    }
}
