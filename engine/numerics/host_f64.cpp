// Host-side float64 exp, log and sin/cos for tables (RoPE), without libm.
//
// Algorithms and coefficients from fdlibm 5.3 (Sun Microsystems, freely distributable):
// e_exp.c (Remez rational approximation after Cody-Waite reduction), e_log.c (log(1+f) through
// s = f/(2+f)), k_sin.c / k_cos.c (degree-13/14 polynomials on [-pi/4, pi/4]) with the three-part
// pi/2 reduction of e_rem_pio2.c for medium arguments. Every step is one correctly rounded double
// operation (no FMA contraction), so results are the same on every IEEE-754 host.
#include <bit>
#include <cstdint>
#include <string>

#include "numerics/exact.h"
#include "util/error.h"

namespace detaudit::numerics {

namespace {

double bits_d(uint64_t b) { return std::bit_cast<double>(b); }
uint64_t d_bits(double d) { return std::bit_cast<uint64_t>(d); }

// 2^k for k in [-1022, 1023].
double pow2_f64(int k) { return bits_d(static_cast<uint64_t>(k + 1023) << 52); }

// y * 2^k for any k (two steps when 2^k itself is out of range).
double scale_f64(double y, int k) {
  if (k > 1023) return (y * pow2_f64(1023)) * pow2_f64(k - 1023);
  if (k < -1022) return (y * pow2_f64(-1022)) * pow2_f64(k + 1022);
  return y * pow2_f64(k);
}

constexpr double LN2_HI = 6.93147180369123816490e-01;  // 0x3fe62e42 fee00000
constexpr double LN2_LO = 1.90821492927058770002e-10;  // 0x3dea39ef 35793c76

double kernel_sin(double x, double y) {
  const double s1 = -1.66666666666666324348e-01;
  const double s2 = 8.33333333332248946124e-03;
  const double s3 = -1.98412698298579493134e-04;
  const double s4 = 2.75573137070700676789e-06;
  const double s5 = -2.50507602534068634195e-08;
  const double s6 = 1.58969099521155010221e-10;
  const double z = x * x;
  const double v = z * x;
  const double r = s2 + z * (s3 + z * (s4 + z * (s5 + z * s6)));
  return x - ((z * (0.5 * y - v * r) - y) - v * s1);
}

double kernel_cos(double x, double y) {
  const double c1 = 4.16666666666666019037e-02;
  const double c2 = -1.38888888888741095749e-03;
  const double c3 = 2.48015872894767294178e-05;
  const double c4 = -2.75573143513906633035e-07;
  const double c5 = 2.08757232129817482790e-09;
  const double c6 = -1.13596475577881948265e-11;
  const double z = x * x;
  const double r = z * (c1 + z * (c2 + z * (c3 + z * (c4 + z * (c5 + z * c6)))));
  const double hz = 0.5 * z;
  const double w = 1.0 - hz;
  return w + (((1.0 - w) - hz) + (z * r - x * y));
}

// |x| reduced by n * pi/2 into y0 + y1 (|y0| <= ~pi/4), for |x| <= 2^20 * pi/2. Returns n.
// pi/2 is pio2_1 + pio2_2 + pio2_3 + pio2_3t (33 + 33 + 33 + 53 bits); fn * pio2_k is exact.
int64_t reduce_pio2(double x, double* y0, double* y1) {
  const double invpio2 = 6.36619772367581382433e-01;
  const double pio2_1 = 1.57079632673412561417e+00;
  const double pio2_2 = 6.07710050630396597660e-11;
  const double pio2_2t = 2.02226624879595063154e-21;
  const double pio2_3 = 2.02226624871116645580e-21;
  const double pio2_3t = 8.47842766036889956997e-32;
  const double t = x < 0 ? -x : x;
  const int64_t n = static_cast<int64_t>(t * invpio2 + 0.5);
  const double fn = static_cast<double>(n);
  double r = t - fn * pio2_1;
  double w = fn * pio2_2;
  double u = r;
  r = u - w;
  w = fn * pio2_2t - ((u - r) - w);
  u = r;
  w = fn * pio2_3;
  r = u - w;
  w = fn * pio2_3t - ((u - r) - w);
  *y0 = r - w;
  *y1 = (r - *y0) - w;
  if (x < 0) {
    *y0 = -*y0;
    *y1 = -*y1;
    return -n;
  }
  return n;
}

}  // namespace

double exp_f64(double x) {
  if (x != x) return x;
  if (x > 709.782712893383973096) return bits_d(0x7ff0000000000000ull);
  if (x < -745.13321910194110842) return 0.0;
  const double invln2 = 1.44269504088896338700e+00;
  const double p1 = 1.66666666666666019037e-01;
  const double p2 = -2.77777777770155933842e-03;
  const double p3 = 6.61375632143793436117e-05;
  const double p4 = -1.65339022054652515390e-06;
  const double p5 = 4.13813679705723846039e-08;
  const double t = invln2 * x;
  const int k = static_cast<int>(t < 0 ? t - 0.5 : t + 0.5);
  const double dk = static_cast<double>(k);
  const double hi = x - dk * LN2_HI;
  const double lo = dk * LN2_LO;
  const double r = hi - lo;
  const double rr = r * r;
  const double c = r - rr * (p1 + rr * (p2 + rr * (p3 + rr * (p4 + rr * p5))));
  const double y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi);
  return scale_f64(y, k);
}

double log_f64(double x) {
  if (x != x) return x;
  if (x == 0) return -bits_d(0x7ff0000000000000ull);
  if (x < 0) return bits_d(0x7ff8000000000000ull);
  uint64_t b = d_bits(x);
  if ((b >> 52) == 0x7ff) return x;
  int k = 0;
  if ((b >> 52) == 0) {  // subnormal: scale by 2^54
    x = x * pow2_f64(54);
    b = d_bits(x);
    k = -54;
  }
  k += static_cast<int>(b >> 52) - 1023;
  double m = bits_d((b & 0x000fffffffffffffull) | 0x3ff0000000000000ull);  // [1, 2)
  if (m > 1.41421356237309504880) {
    m = m * 0.5;
    k += 1;
  }
  const double lg1 = 6.666666666666735130e-01;
  const double lg2 = 3.999999999940941908e-01;
  const double lg3 = 2.857142874366239149e-01;
  const double lg4 = 2.222219843214978396e-01;
  const double lg5 = 1.818357216161805012e-01;
  const double lg6 = 1.531383769920937332e-01;
  const double lg7 = 1.479819860511658591e-01;
  const double f = m - 1.0;
  const double hfsq = 0.5 * f * f;
  const double s = f / (2.0 + f);
  const double dk = static_cast<double>(k);
  const double z = s * s;
  const double w = z * z;
  const double t1 = w * (lg2 + w * (lg4 + w * lg6));
  const double t2 = z * (lg1 + w * (lg3 + w * (lg5 + w * lg7)));
  const double rr = t2 + t1;
  return dk * LN2_HI - ((hfsq - (s * (hfsq + rr) + dk * LN2_LO)) - f);
}

void sincos_f64(double x, double* s, double* c) {
  const double limit = 1647099.3291652855;  // 2^20 * pi/2
  if (!(x <= limit && x >= -limit)) {
    throw input_error("sincos_f64: argument " + std::to_string(x) +
                      " outside [-2^20*pi/2, 2^20*pi/2] (a RoPE angle this large means a position "
                      "beyond 2^20)");
  }
  double y0, y1;
  const int64_t n = reduce_pio2(x, &y0, &y1);
  const double sn = kernel_sin(y0, y1);
  const double cs = kernel_cos(y0, y1);
  switch (n & 3) {
    case 0: *s = sn; *c = cs; break;
    case 1: *s = cs; *c = -sn; break;
    case 2: *s = -sn; *c = -cs; break;
    default: *s = -cs; *c = sn; break;
  }
}

}  // namespace detaudit::numerics
