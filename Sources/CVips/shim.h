// The only door into libvips (Debian libvips-dev 8.14).
//
// Swift cannot call C variadic functions, and most of libvips' public API is variadic
// (`vips_thumbnail_buffer(buf, len, &out, width, "height", h, ..., NULL)`). Each wrapper
// below fixes one call's option list so Swift sees an ordinary C function. Keep this file
// small: a wrapper per call the Thumbnails module makes, nothing else.
//
// Ownership: every `VipsImage **out` receives a new reference owned by the caller
// (release with g_object_unref); every `void **buf` receives a g_malloc'd buffer owned by
// the caller (release with g_free). On failure (-1) nothing is returned and the message is
// in vips_error_buffer().
#ifndef CVIPS_SHIM_H
#define CVIPS_SHIM_H

#include <stdint.h>
#include <string.h>
#include <vips/vips.h>

/// Open an image from memory reading only its header (libvips decodes lazily). Used to
/// check width and height against the pixel limit before anything is decoded.
/// The buffer is not copied: it must outlive `*out`.
static inline int cvips_header_from_buffer(const void *buf, size_t len, VipsImage **out) {
    *out = vips_image_new_from_buffer(buf, len, "", "access", VIPS_ACCESS_SEQUENTIAL, NULL);
    return *out ? 0 : -1;
}

/// vips_thumbnail_buffer with shrink-on-load, EXIF auto-rotation (libvips' default) and a
/// crop mode (VIPS_INTERESTING_NONE = fit inside the box, VIPS_INTERESTING_CENTRE = cover).
///
/// The loader is told to fail on any decode warning or error, truncation and corrupt scan
/// data included ("fail_on=warning", also sharp's default for the same reason;
/// libvips' default pads a truncated JPEG with grey and only warns). In 8.14 thumbnail's own
/// "fail_on" property is not forwarded to buffer loaders (checked: a truncated JPEG still
/// loads), so it goes through "option_string", which is.
static inline int cvips_thumbnail_buffer(
    const void *buf, size_t len, VipsImage **out,
    int width, int height, VipsSize size, VipsInteresting crop) {
    return vips_thumbnail_buffer((void *)buf, len, out, width,
        "height", height,
        "size", size,
        "crop", crop,
        "option_string", "fail_on=warning",
        NULL);
}

/// The EXIF orientation (1...8) libvips read from the header; 1 when there is none.
static inline int cvips_orientation(VipsImage *image) {
    int orientation = 1;
    if (vips_image_get_typeof(image, VIPS_META_ORIENTATION) &&
        vips_image_get_int(image, VIPS_META_ORIENTATION, &orientation) == 0 &&
        orientation >= 1 && orientation <= 8)
        return orientation;
    return 1;
}

/// vips_thumbnail_image on an already decoded, upright image (see cvips_thumbnail_buffer for
/// the modes). Used to cut several sizes from one decode.
static inline int cvips_thumbnail_image(
    VipsImage *in, VipsImage **out, int width, int height, VipsSize size, VipsInteresting crop) {
    return vips_thumbnail_image(in, out, width,
        "height", height,
        "size", size,
        "crop", crop,
        "no_rotate", TRUE,
        NULL);
}

/// Convert to 8-bit sRGB (from 16-bit RGB or grey, which PNG allows). libvips' thumbnail
/// already imports an embedded ICC profile into sRGB; this only changes the sample format.
static inline int cvips_to_srgb(VipsImage *in, VipsImage **out) {
    return vips_colourspace(in, out, VIPS_INTERPRETATION_sRGB, NULL);
}

/// A copy of `in` (pixels shared, no work done) without EXIF, XMP, IPTC, ICC or orientation
/// fields. The savers' "strip" flag should be enough, but libvips 8.14's webpsave still
/// writes an EXIF chunk with strip set (checked), so the metadata is removed at the source.
/// vips_copy makes a new image, so removing fields never touches an image someone else holds.
static inline int cvips_copy_without_metadata(VipsImage *in, VipsImage **out) {
    if (vips_copy(in, out, NULL))
        return -1;
    gchar **fields = vips_image_get_fields(*out);
    for (int i = 0; fields[i]; i++) {
        const char *f = fields[i];
        if (g_str_has_prefix(f, "exif-") || g_str_has_prefix(f, "xmp-") ||
            g_str_has_prefix(f, "iptc-") || g_str_has_prefix(f, "icc-") ||
            g_str_has_prefix(f, "gps") || strcmp(f, VIPS_META_ORIENTATION) == 0)
            vips_image_remove(*out, f);
    }
    g_strfreev(fields);
    return 0;
}

/// Flatten alpha onto white (JPEG cannot carry alpha).
static inline int cvips_flatten_white(VipsImage *in, VipsImage **out) {
    VipsArrayDouble *bg = vips_array_double_newv(1, 255.0);
    int r = vips_flatten(in, out, "background", bg, NULL);
    vips_area_unref(VIPS_AREA(bg));
    return r;
}

/// JPEG encode with every metadata item (EXIF, XMP, IPTC, ICC) stripped.
static inline int cvips_jpegsave_buffer(VipsImage *in, void **buf, size_t *len, int quality) {
    return vips_jpegsave_buffer(in, buf, len,
        "Q", quality,
        "strip", TRUE,
        "optimize_coding", TRUE,
        NULL);
}

/// WebP encode with every metadata item stripped.
static inline int cvips_webpsave_buffer(VipsImage *in, void **buf, size_t *len, int quality) {
    return vips_webpsave_buffer(in, buf, len,
        "Q", quality,
        "strip", TRUE,
        NULL);
}

// ---- Per-image time limit -------------------------------------------------------------
//
// libvips evaluates lazily: the decode and resize run inside the save call (or inside
// vips_image_copy_memory when several sizes share one decode), which emits "eval" progress
// signals for the image being computed once vips_image_set_progress is on for it.
// The handler compares the monotonic clock against a deadline carried in the signal's user
// data (a gint64 in microseconds, packed into the pointer: 64-bit targets only) and calls
// vips_image_set_kill, which makes the computation stop at the next tile and the call
// return -1. (Chosen over a watchdog thread: no extra thread, and the kill happens on the
// computing threads themselves.) This is the one clock the resize reads, and it only
// decides *whether* the image fails, never what the output is.

static void cvips__deadline_eval(VipsImage *image, VipsProgress *progress, void *user) {
    (void)progress;
    gint64 deadline = (gint64)(intptr_t)user;
    if (g_get_monotonic_time() > deadline)
        vips_image_set_kill(image, TRUE);
}

/// Arm the time limit on `image`: evaluation is killed once `timeout_us` has passed.
static inline void cvips_set_deadline(VipsImage *image, gint64 timeout_us) {
    gint64 deadline = g_get_monotonic_time() + timeout_us;
    vips_image_set_progress(image, TRUE);
    g_signal_connect(image, "eval", G_CALLBACK(cvips__deadline_eval), (void *)(intptr_t)deadline);
}

/// The monotonic clock the deadlines use, in microseconds (to tell a kill from a decode error).
static inline gint64 cvips_monotonic_us(void) { return g_get_monotonic_time(); }

/// SHA-256 of a byte range as 64 lowercase hex characters (GLib, already linked by libvips).
/// The result is g_malloc'd: the caller frees it with g_free.
static inline char *cvips_sha256_hex(const void *data, size_t len) {
    return g_compute_checksum_for_data(G_CHECKSUM_SHA256, (const guchar *)data, len);
}

#endif
