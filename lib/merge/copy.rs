//! Moves tensor bytes from mapped checkpoint files into their place in an output file, in bounded
//! pieces: a contiguous run with nothing to convert goes kernel-to-kernel (`copy_file_range`), anything
//! else is gathered (strides, byte order, dtype cast) into a buffer of at most [`PIECE`] bytes. Input
//! pages are dropped from our mapping once used, so resident memory stays flat however large the model.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;

use super::input::Input;
use super::tensor::{contiguous_strides, DType};

/// The largest buffer one worker holds.
pub const PIECE: usize = 8 << 20;

/// One source view placed into an output tensor (a DCP chunk, a ZeRO partition slice, a whole tensor).
#[derive(Debug, Clone)]
pub struct Piece {
    /// The box this piece covers, in the tensor's tiling shape.
    pub offsets: Vec<u64>,
    pub sizes: Vec<u64>,
    pub input: usize,
    /// Byte offset of the storage's element 0 within the input file.
    pub storage_start: usize,
    pub dtype: DType,
    /// Element offset and strides of the view within the storage.
    pub offset: u64,
    pub strides: Vec<u64>,
    pub big_endian: bool,
}

/// Where one output tensor goes and what it is made of.
pub struct Target<'a> {
    pub out: &'a File,
    /// Byte offset of the tensor's first element in `out`.
    pub base: u64,
    pub dtype: DType,
    pub tile_shape: &'a [u64],
    pub pieces: &'a [Piece],
}

/// Writes one whole tensor; calls `progress(bytes)` as output bytes land.
pub fn write_tensor(
    t: &Target,
    inputs: &[Input],
    progress: &(dyn Fn(u64) + Sync),
) -> io::Result<()> {
    let numel: u64 = t.tile_shape.iter().product();
    let bytes = numel as usize * t.dtype.size();
    // Pieces made of long contiguous runs with nothing to convert go kernel-to-kernel; only tensors
    // made of many short or strided runs are worth assembling in memory.
    let direct = t.pieces.iter().all(|p| {
        let (_, len, contiguous) = run_shape(t.tile_shape, p);
        p.dtype == t.dtype
            && !p.big_endian
            && contiguous
            && len as usize * t.dtype.size() >= 64 << 10
    });
    if bytes <= PIECE && !direct {
        // Small tensors: assemble in memory, one write.
        let mut buf = vec![0u8; bytes];
        for p in t.pieces {
            for_each_run(t.tile_shape, p, |out_elem, src_elem, len| {
                let dst =
                    &mut buf[out_elem as usize * t.dtype.size()..][..len as usize * t.dtype.size()];
                let (lo, hi) = gather(&inputs[p.input], p, src_elem, len, t.dtype, dst);
                inputs[p.input].release(lo, hi);
                Ok(())
            })?;
        }
        t.out.write_all_at(&buf, t.base)?;
        progress(bytes as u64);
        return Ok(());
    }
    let mut buf = Vec::new();
    for p in t.pieces {
        let input = &inputs[p.input];
        let fast = p.dtype == t.dtype && !p.big_endian;
        for_each_run(t.tile_shape, p, |out_elem, src_elem, len| {
            let es = t.dtype.size() as u64;
            let dst = t.base + out_elem * es;
            if fast && src_elem.contiguous {
                let src = p.storage_start as u64 + src_elem.start * es;
                copy_range(input, p.input, src, t.out, dst, len * es)?;
                progress(len * es);
                return Ok(());
            }
            let per = (PIECE / t.dtype.size()) as u64;
            let mut done = 0;
            while done < len {
                let n = per.min(len - done);
                buf.resize(n as usize * t.dtype.size(), 0);
                let s = SrcRun {
                    skip: src_elem.skip + done,
                    ..src_elem
                };
                let (lo, hi) = gather(input, p, s, n, t.dtype, &mut buf);
                t.out.write_all_at(&buf, dst + done * es)?;
                input.release(lo, hi);
                progress(n * es);
                done += n;
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// The source side of one output run: the view's inner block starting at element `start` of the
/// storage, `skip` elements into the run.
#[derive(Debug, Clone, Copy)]
pub struct SrcRun {
    pub start: u64,
    pub skip: u64,
    pub contiguous: bool,
    /// First dim of the inner block.
    pub m: usize,
}

/// Calls `f(output_element, source, length)` for every output-contiguous run of the piece's box.
/// The runs of a piece: the first dim of the output-contiguous block, the block's length in elements,
/// and whether the source is contiguous over the block too.
fn run_shape(shape: &[u64], p: &Piece) -> (usize, u64, bool) {
    let n = shape.len();
    // The output-contiguous suffix starts at the last dim the box does not span fully.
    let mut m = 0;
    for d in (0..n).rev() {
        if p.sizes[d] != shape[d] {
            m = d;
            break;
        }
    }
    let len: u64 = p.sizes[m.min(n)..].iter().product();
    let mut contiguous = true;
    let mut expect = 1u64;
    for d in (m..n).rev() {
        if p.sizes[d] != 1 && p.strides[d] != expect {
            contiguous = false;
        }
        expect = expect.saturating_mul(p.sizes[d]);
    }
    (m, len, contiguous)
}

fn for_each_run(
    shape: &[u64],
    p: &Piece,
    mut f: impl FnMut(u64, SrcRun, u64) -> io::Result<()>,
) -> io::Result<()> {
    let n = shape.len();
    if p.sizes.contains(&0) {
        return Ok(());
    }
    let g = contiguous_strides(shape);
    let (m, len, contiguous) = run_shape(shape, p);
    let mut idx = vec![0u64; m];
    loop {
        let mut out = 0u64;
        let mut src = p.offset;
        for d in 0..n {
            let i = if d < m { idx[d] } else { 0 };
            out += (p.offsets[d] + i) * g[d];
            src += i * p.strides[d];
        }
        f(
            out,
            SrcRun {
                start: src,
                skip: 0,
                contiguous,
                m,
            },
            len,
        )?;
        // Odometer over the outer dims.
        let mut d = m;
        loop {
            if d == 0 {
                return Ok(());
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < p.sizes[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// Reads `count` elements of a run into `dst` as `out` dtype; returns the input byte span touched.
fn gather(
    input: &Input,
    p: &Piece,
    run: SrcRun,
    count: u64,
    out: DType,
    dst: &mut [u8],
) -> (usize, usize) {
    let src = input.bytes();
    let es = p.dtype.size();
    let os = out.size();
    let conv = converter(p.dtype, p.big_endian, out);
    if run.contiguous {
        // The common case: one slice in, one slice out.
        let at = p.storage_start + (run.start + run.skip) as usize * es;
        let n = count as usize;
        let s = &src[at..at + n * es];
        match conv {
            Conv::Copy => dst[..n * es].copy_from_slice(s),
            Conv::Fast(f) => {
                for (i, o) in s.chunks_exact(es).zip(dst.chunks_exact_mut(os)) {
                    f(i, o);
                }
            }
            Conv::General => {
                for (i, o) in s.chunks_exact(es).zip(dst.chunks_exact_mut(os)) {
                    convert(i, p.dtype, p.big_endian, out, o);
                }
            }
        }
        return (at, at + n * es);
    }
    let dims = &p.sizes[run.m..];
    let strides = &p.strides[run.m..];
    // Unravel the first element's position within the inner block.
    let mut idx = vec![0u64; dims.len()];
    let mut k = run.skip;
    for d in (0..dims.len()).rev() {
        idx[d] = k % dims[d];
        k /= dims[d];
    }
    let (mut lo, mut hi) = (usize::MAX, 0usize);
    for j in 0..count as usize {
        let mut e = run.start;
        for d in 0..dims.len() {
            e += idx[d] * strides[d];
        }
        let at = p.storage_start + e as usize * es;
        let bytes = &src[at..at + es];
        lo = lo.min(at);
        hi = hi.max(at + es);
        let o = &mut dst[j * os..(j + 1) * os];
        match conv {
            Conv::Copy => o.copy_from_slice(bytes),
            Conv::Fast(f) => f(bytes, o),
            Conv::General => convert(bytes, p.dtype, p.big_endian, out, o),
        }
        for d in (0..dims.len()).rev() {
            idx[d] += 1;
            if idx[d] < dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    (lo, hi)
}

/// The error of a copy whose input (by index) ended before the bytes it was to give.
#[derive(Debug)]
pub struct InputEnded(pub usize);

impl std::fmt::Display for InputEnded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the input ended early")
    }
}

impl std::error::Error for InputEnded {}

/// The input an error of [`write_tensor`] is about, if it is about one.
pub fn input_of(e: &io::Error) -> Option<usize> {
    e.get_ref()
        .and_then(|e| e.downcast_ref::<InputEnded>())
        .map(|e| e.0)
}

/// Copies `len` bytes between files without passing them through our memory when the kernel can.
fn copy_range(
    input: &Input,
    index: usize,
    src: u64,
    out: &File,
    dst: u64,
    len: u64,
) -> io::Result<()> {
    let mut done = 0u64;
    let mut kernel = true;
    while done < len {
        let n = (len - done).min(PIECE as u64 * 8) as usize;
        if kernel {
            let mut off_in = (src + done) as libc::loff_t;
            let mut off_out = (dst + done) as libc::loff_t;
            // SAFETY: both descriptors are open files we own for the duration of the call, and the
            // offsets are plain integers passed by pointer as the syscall requires.
            let r = unsafe {
                libc::copy_file_range(
                    input.file.as_raw_fd(),
                    &mut off_in,
                    out.as_raw_fd(),
                    &mut off_out,
                    n,
                    0,
                )
            };
            if r > 0 {
                done += r as u64;
                continue;
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EXDEV | libc::ENOSYS | libc::EINVAL | libc::EOPNOTSUPP) | None
                    if r < 0 =>
                {
                    kernel = false;
                    continue;
                }
                _ if r == 0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        InputEnded(index),
                    ))
                }
                _ => return Err(err),
            }
        }
        let n = (len - done).min(PIECE as u64) as usize;
        let at = (src + done) as usize;
        let slice = &input.bytes()[at..at + n];
        out.write_all_at(slice, dst + done)?;
        input.release(at, at + n);
        done += n as u64;
    }
    Ok(())
}

/// How one element is turned into the output dtype.
#[derive(Clone, Copy)]
enum Conv {
    /// A plain byte copy.
    Copy,
    /// A tight function for a common cast.
    Fast(fn(&[u8], &mut [u8])),
    /// The general [`convert`] (rare casts, big-endian input).
    General,
}

fn converter(from: DType, big_endian: bool, to: DType) -> Conv {
    if big_endian {
        return Conv::General;
    }
    match (from, to) {
        _ if from == to => Conv::Copy,
        (DType::F32, DType::BF16) => Conv::Fast(|i, o| {
            let f = f32::from_le_bytes([i[0], i[1], i[2], i[3]]);
            o.copy_from_slice(&f32_to_bf16(f).to_le_bytes());
        }),
        (DType::F32, DType::F16) => Conv::Fast(|i, o| {
            let f = f32::from_le_bytes([i[0], i[1], i[2], i[3]]);
            o.copy_from_slice(&f32_to_f16(f).to_le_bytes());
        }),
        (DType::BF16, DType::F32) => Conv::Fast(|i, o| o.copy_from_slice(&[0, 0, i[0], i[1]])),
        (DType::F16, DType::F32) => Conv::Fast(|i, o| {
            o.copy_from_slice(&f16_to_f32(u16::from_le_bytes([i[0], i[1]])).to_le_bytes())
        }),
        _ => Conv::General,
    }
}

/// Converts one element.
fn convert(src: &[u8], from: DType, big_endian: bool, to: DType, dst: &mut [u8]) {
    let mut b = [0u8; 8];
    let n = src.len();
    b[..n].copy_from_slice(src);
    if big_endian {
        b[..n].reverse();
    }
    if from == to {
        dst.copy_from_slice(&b[..n]);
        return;
    }
    let v = to_f64(&b[..n], from);
    match to {
        DType::F64 => dst.copy_from_slice(&v.to_le_bytes()),
        DType::F32 => dst.copy_from_slice(&(v as f32).to_le_bytes()),
        // torch's f16→bf16 goes through c10::BFloat16(float), whose NaN is 0x7fc0; its vectorised
        // f32/f64→bf16 (aten/src/ATen/cpu/vec/vec512/vec512_bfloat16.h::cvtfp32_bf16) writes 0xffff.
        DType::BF16 if v.is_nan() && from == DType::F16 => {
            dst.copy_from_slice(&0x7fc0u16.to_le_bytes())
        }
        DType::BF16 => dst.copy_from_slice(&f32_to_bf16(narrow(&b[..n], from, v)).to_le_bytes()),
        DType::F16 => dst.copy_from_slice(&f32_to_f16(narrow(&b[..n], from, v)).to_le_bytes()),
        // Non-float targets are never planned with a different source dtype.
        _ => dst.copy_from_slice(&b[..dst.len()]),
    }
}

/// The f32 torch would convert through: c10's Half and BFloat16 are built from a float.
fn narrow(b: &[u8], from: DType, v: f64) -> f32 {
    match from {
        DType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        _ => v as f32,
    }
}

fn to_f64(b: &[u8], from: DType) -> f64 {
    let u = |n: usize| {
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(&b[..n]);
        u64::from_le_bytes(a)
    };
    match from {
        DType::F64 => f64::from_bits(u(8)),
        DType::F32 => f64::from(f32::from_bits(u(4) as u32)),
        DType::F16 => f64::from(f16_to_f32(u(2) as u16)),
        DType::BF16 => f64::from(f32::from_bits((u(2) as u32) << 16)),
        DType::I64 => u(8) as i64 as f64,
        DType::I32 => f64::from(u(4) as u32 as i32),
        DType::I16 => f64::from(u(2) as u16 as i16),
        DType::I8 => f64::from(b[0] as i8),
        DType::U8 | DType::Bool => f64::from(b[0]),
        DType::U16 => f64::from(u(2) as u16),
        DType::U32 => f64::from(u(4) as u32),
        DType::U64 => u(8) as f64,
        // Never cast: --dtype converts the four float dtypes only.
        DType::F8E4M3
        | DType::F8E5M2
        | DType::F8E8M0
        | DType::F8E4M3Fnuz
        | DType::F8E5M2Fnuz
        | DType::F4X2
        | DType::C64 => f64::NAN,
    }
}

/// torch's CPU float→bfloat16 cast of a tensor: round to nearest even, and every NaN (whatever its
/// sign and payload) to 0xffff, as the vectorised kernel does
/// (aten/src/ATen/cpu/vec/vec512/vec512_bfloat16.h::cvtfp32_bf16; the AVX2 one is the same).
pub fn f32_to_bf16(f: f32) -> u16 {
    if f.is_nan() {
        return 0xffff;
    }
    let bits = f.to_bits();
    let bias = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(bias) >> 16) as u16
}

/// torch's CPU float→half cast of a tensor: c10's fp16_ieee_from_fp32_value for numbers; a NaN keeps
/// its sign and the top 10 bits of its payload and is made quiet, as the F16C `vcvtps2ph` instruction
/// the vectorised kernel uses does (c10's scalar routine would write 0x7e00).
pub fn f32_to_f16(f: f32) -> u16 {
    if f.is_nan() {
        let w = f.to_bits();
        return (((w >> 16) & 0x8000) | 0x7e00 | ((w >> 13) & 0x03ff)) as u16;
    }
    let scale_to_inf = f32::from_bits(0x7780_0000);
    let scale_to_zero = f32::from_bits(0x0880_0000);
    let mut base = (f.abs() * scale_to_inf) * scale_to_zero;
    let w = f.to_bits();
    let shl1_w = w.wrapping_add(w);
    let sign = w & 0x8000_0000;
    let mut bias = shl1_w & 0xff00_0000;
    if bias < 0x7100_0000 {
        bias = 0x7100_0000;
    }
    base += f32::from_bits((bias >> 1) + 0x0780_0000);
    let bits = base.to_bits();
    let exp_bits = (bits >> 13) & 0x0000_7c00;
    let mantissa_bits = bits & 0x0000_0fff;
    let nonsign = exp_bits + mantissa_bits;
    ((sign >> 16)
        | if shl1_w > 0xff00_0000 {
            0x7e00
        } else {
            nonsign
        }) as u16
}

pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = if exp == 0 {
        if man == 0 {
            sign
        } else {
            let v = man as f32 * f32::from_bits(0x3380_0000); // 2^-24
            sign | v.to_bits()
        }
    } else if exp == 31 && man != 0 {
        // A NaN is made quiet and keeps its payload, as F16C `vcvtph2ps` (torch's vectorised
        // half→float) does.
        sign | 0x7fc0_0000 | (man << 13)
    } else if exp == 31 {
        sign | 0x7f80_0000
    } else {
        sign | ((exp + 112) << 23) | (man << 13)
    };
    f32::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_conversions_match_c10() {
        assert_eq!(f32_to_f16(1.0), 0x3c00);
        assert_eq!(f32_to_f16(65504.0), 0x7bff);
        assert_eq!(f32_to_f16(1e6), 0x7c00);
        assert_eq!(f32_to_f16(f32::NAN), 0x7e00);
        // NaN payloads as torch 2.13's CPU `.to()` writes them (seen with tensors of 1000 elements).
        assert_eq!(f32_to_f16(f32::from_bits(0xffc1_2345)), 0xfe09);
        assert_eq!(f32_to_f16(f32::from_bits(0x7fa0_0000)), 0x7f00);
        assert_eq!(f32_to_f16(f32::from_bits(0x7f80_0001)), 0x7e00);
        assert_eq!(f16_to_f32(0x7c01).to_bits(), 0x7fc0_2000);
        assert_eq!(f16_to_f32(0xfe01).to_bits(), 0xffc0_2000);
        assert_eq!(f16_to_f32(0x7c00), f32::INFINITY);
        assert_eq!(f32_to_bf16(f32::from_bits(0x7fc0_0000)), 0xffff);
        assert_eq!(f32_to_bf16(f32::from_bits(0xff80_0001)), 0xffff);
        assert_eq!(f32_to_f16(-2.0), 0xc000);
        assert_eq!(f32_to_f16(5.960_464_5e-8), 0x0001);
        assert_eq!(f16_to_f32(0x0001), 5.960_464_5e-8);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80); // tie to even
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
    }
}
