// Weight blocks in integer form (numerics/wblock.h, docs/precision-contract.md section 6), decoded
// 32 elements at a time from a row of raw ggml bytes.
//
// Goals: wblock_decode gives exactly numerics::weight_decode_block's fields for every type the
// exact engine computes (F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K MXFP4). Bytes are
// read with shifts from 32-bit words (no 8-bit storage needed); fp16 scales decode from their bits.
// Non-goals: validation. The host checked the type, the row length and every fp16 scale / float
// weight for finiteness (kernels::cpu::weight_row_bounds at upload); no other type reaches here.
//
// The including shader defines `uint wb_word(uint i)`, word i of the weight bytes, before
// including this file, and includes exact.glsl first.

// WT_F32 ... WT_BF16 (gguf's type ids): contract.glsl, included by exact.glsl.

// w[i] = d_mant * 2^d_exp * scale[i / 16] * q[i] + m_mant * 2^m_exp * mcoef[i / 16]
struct wblock {
  int q[32];
  int scale[2];
  int d_mant;
  int d_exp;
  int mcoef[2];
  int m_mant;
  int m_exp;
};

uint wb_byte(uint off) { return (wb_word(off >> 2u) >> ((off & 3u) * 8u)) & 0xffu; }

uint wb_u16(uint off) { return wb_byte(off) | (wb_byte(off + 1u) << 8u); }

uint wb_u32(uint off) { return wb_u16(off) | (wb_u16(off + 2u) << 16u); }

int wb_i8(uint off) { return int(wb_byte(off) << 24u) >> 24; }

// An fp16 scale as mant * 2^exp, exactly: normal mant = 1024 + F, exp = E - 25; subnormal and
// zero mant = F, exp = -24; the sign on mant.
void wb_fp16_split(uint h, out int mant, out int e) {
  const int ex = int((h >> 10u) & 31u);
  const int frac = int(h & 1023u);
  const int m = ex == 0 ? frac : 1024 + frac;
  e = ex == 0 ? -24 : ex - 25;
  mant = (h & 0x8000u) != 0u ? -m : m;
}

// The binary32 bits of a finite fp16 value (exact: fp16 subnormals are binary32 normals).
uint wb_fp16_to_f32_bits(uint h) {
  const uint sign = (h & 0x8000u) << 16u;
  const uint ex = (h >> 10u) & 31u;
  const uint frac = h & 1023u;
  if (ex != 0u) return sign | ((ex + 112u) << 23u) | (frac << 13u);
  if (frac == 0u) return sign;
  const int p = findMSB(frac);  // value = frac * 2^-24, leading bit at 2^(p - 24)
  return sign | (uint(p + 103) << 23u) | ((frac << uint(23 - p)) & 0x7fffffu);
}

void wb_set_plain(inout wblock w, int sc0, int sc1) {
  w.scale[0] = sc0;
  w.scale[1] = sc1;
  w.mcoef[0] = 0;
  w.mcoef[1] = 0;
  w.m_mant = 0;
  w.m_exp = 0;
}

// numerics::quantize_block of the n_valid floats of block b; the rest q = 0.
void wb_decode_float(int t, uint row, uint b, int n_valid, inout wblock w) {
  uint bits[32];
  uint amax = 0u;
  for (int i = 0; i < 32; ++i) {
    uint v = 0u;
    if (i < n_valid) {
      const uint e = b * 32u + uint(i);
      if (t == WT_F32) {
        v = wb_u32(row + 4u * e);
      } else {
        const uint h = wb_u16(row + 2u * e);
        v = t == WT_F16 ? wb_fp16_to_f32_bits(h) : h << 16u;
      }
    }
    bits[i] = v;
    const uint a = v & 0x7fffffffu;
    if (a >= 0x00800000u && a > amax) amax = a;
  }
  const int be = block_exp_from_amax_bits(amax);
  for (int i = 0; i < 32; ++i) {
    w.q[i] = be == EXP_ZERO ? 0 : quantize_elem(uintBitsToFloat(bits[i]), be);
  }
  w.d_mant = be == EXP_ZERO ? 0 : 1;
  w.d_exp = be == EXP_ZERO ? 0 : be;
  wb_set_plain(w, 1, 1);
}

// Q4_0 (18 B), Q4_1 (20 B), Q5_0 (22 B), Q5_1 (24 B) blocks of 32.
void wb_decode_legacy(int t, uint row, uint b, inout wblock w) {
  const bool five = t == WT_Q5_0 || t == WT_Q5_1;
  const bool has_min = t == WT_Q4_1 || t == WT_Q5_1;
  const uint size = t == WT_Q4_0 ? 18u : t == WT_Q4_1 ? 20u : t == WT_Q5_0 ? 22u : 24u;
  const uint p = row + b * size;
  wb_fp16_split(wb_u16(p), w.d_mant, w.d_exp);
  wb_set_plain(w, 1, 1);
  if (has_min) {
    wb_fp16_split(wb_u16(p + 2u), w.m_mant, w.m_exp);
    w.mcoef[0] = 1;
    w.mcoef[1] = 1;
  }
  const uint off_qh = has_min ? 4u : 2u;
  const uint qs = p + off_qh + (five ? 4u : 0u);
  const uint qh = five ? wb_u32(p + off_qh) : 0u;
  const int offset = has_min ? 0 : (five ? 16 : 8);
  for (int j = 0; j < 32; ++j) {
    const uint nib = j < 16 ? (wb_byte(qs + uint(j)) & 15u) : (wb_byte(qs + uint(j - 16)) >> 4u);
    w.q[j] = int(nib | (((qh >> uint(j)) & 1u) << 4u)) - offset;
  }
}

void wb_decode_q8_0(uint row, uint b, inout wblock w) {
  const uint p = row + b * 34u;
  wb_fp16_split(wb_u16(p), w.d_mant, w.d_exp);
  wb_set_plain(w, 1, 1);
  for (int j = 0; j < 32; ++j) w.q[j] = wb_i8(p + 2u + uint(j));
}

// ---- K-quant super-blocks of 256: slice s (0..7) holds elements 32s .. 32s+31 ----

int wb_read_2bit(uint qs, uint e) {
  return int((wb_byte(qs + 32u * (e / 128u) + e % 32u) >> (2u * ((e / 32u) % 4u))) & 3u);
}

int wb_read_bit_plane(uint plane, uint e) { return int((wb_byte(plane + e % 32u) >> (e / 32u)) & 1u); }

int wb_read_nibble(uint qs, uint e) {
  return int((wb_byte(qs + 32u * (e / 64u) + e % 32u) >> (4u * ((e / 32u) % 2u))) & 15u);
}

// Q4_K / Q5_K: the six-bit (scale, min) of sub-block j (ggml get_scale_min_k4).
void wb_read_scale_min_k4(uint s, uint j, out int sc, out int m) {
  if (j < 4u) {
    sc = int(wb_byte(s + j) & 63u);
    m = int(wb_byte(s + j + 4u) & 63u);
  } else {
    sc = int((wb_byte(s + j + 4u) & 15u) | ((wb_byte(s + j - 4u) >> 6u) << 4u));
    m = int((wb_byte(s + j + 4u) >> 4u) | ((wb_byte(s + j) >> 6u) << 4u));
  }
}

int wb_read_scale_q3(uint s, uint i) {
  const uint low = i < 8u ? (wb_byte(s + i) & 15u) : (wb_byte(s + i - 8u) >> 4u);
  return int(low | (((wb_byte(s + 8u + i % 4u) >> (2u * (i / 4u))) & 3u) << 4u));
}

void wb_decode_q2_k(uint p, uint s, inout wblock w) {  // 84 B
  wb_fp16_split(wb_u16(p + 80u), w.d_mant, w.d_exp);
  wb_fp16_split(wb_u16(p + 82u), w.m_mant, w.m_exp);
  w.m_mant = -w.m_mant;
  for (int h = 0; h < 2; ++h) {
    const uint sc = wb_byte(p + 2u * s + uint(h));
    w.scale[h] = int(sc & 15u);
    w.mcoef[h] = int(sc >> 4u);
  }
  for (int l = 0; l < 32; ++l) w.q[l] = wb_read_2bit(p + 16u, 32u * s + uint(l));
}

void wb_decode_q3_k(uint p, uint s, inout wblock w) {  // 110 B
  wb_fp16_split(wb_u16(p + 108u), w.d_mant, w.d_exp);
  wb_set_plain(w, wb_read_scale_q3(p + 96u, 2u * s) - 32, wb_read_scale_q3(p + 96u, 2u * s + 1u) - 32);
  for (int l = 0; l < 32; ++l) {
    const uint e = 32u * s + uint(l);
    w.q[l] = wb_read_2bit(p + 32u, e) - (wb_read_bit_plane(p, e) != 0 ? 0 : 4);
  }
}

void wb_decode_q45_k(uint p, uint s, bool five, inout wblock w) {  // 144 B / 176 B
  wb_fp16_split(wb_u16(p), w.d_mant, w.d_exp);
  wb_fp16_split(wb_u16(p + 2u), w.m_mant, w.m_exp);
  w.m_mant = -w.m_mant;
  int sc;
  int m;
  wb_read_scale_min_k4(p + 4u, s, sc, m);
  w.scale[0] = sc;
  w.scale[1] = sc;
  w.mcoef[0] = m;
  w.mcoef[1] = m;
  const uint qs = p + (five ? 48u : 16u);
  for (int l = 0; l < 32; ++l) {
    const uint e = 32u * s + uint(l);
    w.q[l] = wb_read_nibble(qs, e) | (five ? wb_read_bit_plane(p + 16u, e) << 4 : 0);
  }
}

void wb_decode_q6_k(uint p, uint s, inout wblock w) {  // 210 B
  wb_fp16_split(wb_u16(p + 208u), w.d_mant, w.d_exp);
  wb_set_plain(w, wb_i8(p + 192u + 2u * s), wb_i8(p + 193u + 2u * s));
  for (int l = 0; l < 32; ++l) {
    const uint e = 32u * s + uint(l);
    const uint h = e / 128u;
    const uint g = (e / 32u) % 4u;
    const uint ll = e % 32u;
    const uint low = (wb_byte(p + 64u * h + 32u * (g & 1u) + ll) >> (4u * (g >> 1u))) & 15u;
    const uint high = (wb_byte(p + 128u + 32u * h + ll) >> (2u * g)) & 3u;
    w.q[l] = int(low | (high << 4u)) - 32;
  }
}

// numerics::inl::mxfp4_doubled: twice the e2m1 value of a 4-bit code (0 1 2 3 4 6 8 12, bit 3 the sign).
int wb_mxfp4_doubled(uint code) {
  const int m = int(code & 7u);
  const int v = m < 4 ? m : ((m & 1) != 0 ? 3 : 2) << ((m >> 1) - 1);
  return (code & 8u) != 0u ? -v : v;
}

// mxfp4 (17 B): e (E8M0), qs[16]; element j < 16 the low nibble of qs[j], j >= 16 the high nibble
// of qs[j - 16]; the value is the doubled e2m1 value times 2^(e - 128).
void wb_decode_mxfp4(uint row, uint b, inout wblock w) {
  const uint p = row + b * 17u;
  w.d_mant = 1;
  w.d_exp = int(wb_byte(p)) - 128;
  wb_set_plain(w, 1, 1);
  for (uint j = 0u; j < 16u; ++j) {
    const uint byte = wb_byte(p + 1u + j);
    w.q[j] = wb_mxfp4_doubled(byte & 15u);
    w.q[j + 16u] = wb_mxfp4_doubled(byte >> 4u);
  }
}

// Decodes 32-element block b of the row whose first byte is at byte offset `row` of the weight
// words. n_valid (1..32) elements are in the row (fewer only in the last block of an F32/F16/BF16
// row); the others are q = 0 and are never read.
void wblock_decode(int t, uint row, uint b, int n_valid, out wblock w) {
  if (t == WT_F32 || t == WT_F16 || t == WT_BF16) {
    wb_decode_float(t, row, b, n_valid, w);
  } else if (t == WT_Q8_0) {
    wb_decode_q8_0(row, b, w);
  } else if (t == WT_MXFP4) {
    wb_decode_mxfp4(row, b, w);
  } else if (t == WT_Q2_K) {
    wb_decode_q2_k(row + (b / 8u) * 84u, b % 8u, w);
  } else if (t == WT_Q3_K) {
    wb_decode_q3_k(row + (b / 8u) * 110u, b % 8u, w);
  } else if (t == WT_Q4_K) {
    wb_decode_q45_k(row + (b / 8u) * 144u, b % 8u, false, w);
  } else if (t == WT_Q5_K) {
    wb_decode_q45_k(row + (b / 8u) * 176u, b % 8u, true, w);
  } else if (t == WT_Q6_K) {
    wb_decode_q6_k(row + (b / 8u) * 210u, b % 8u, w);
  } else {
    wb_decode_legacy(t, row, b, w);
  }
}
