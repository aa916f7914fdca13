// LayerNorm over the last axis of a float32 [rows, width] matrix, forward and
// backward, one pass over the data each: TensorFlow's ops take ~12 passes
// forward and ~18 backward (each a full read/write of the matrix), and on a
// CPU that streams ~10 GB/s per core the passes, not the arithmetic, are
// the cost. Built by keras_transformer/kernels/native/__init__.py on first use.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace keras_transformer {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::TensorShapeUtils;
using ::tensorflow::errors::InvalidArgument;
namespace shape_inference = ::tensorflow::shape_inference;

REGISTER_OP("KerasTransformerLayerNorm")
    .Input("x: float")
    .Input("gamma: float")
    .Input("beta: float")
    .Attr("epsilon: float")
    .Output("y: float")
    .Output("mean: float")
    .Output("inverse_std: float")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle x;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &x));
      c->set_output(0, x);
      c->set_output(1, c->Vector(c->Dim(x, 0)));
      c->set_output(2, c->Vector(c->Dim(x, 0)));
      return absl::OkStatus();
    })
    .Doc("gamma * (x - mean) * inverse_std + beta over the last axis; also returns the row statistics.");

REGISTER_OP("KerasTransformerLayerNormGrad")
    .Input("dy: float")
    .Input("x: float")
    .Input("gamma: float")
    .Input("mean: float")
    .Input("inverse_std: float")
    .Output("dx: float")
    .Output("dgamma: float")
    .Output("dbeta: float")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(1));
      c->set_output(1, c->input(2));
      c->set_output(2, c->input(2));
      return absl::OkStatus();
    })
    .Doc("Gradient of KerasTransformerLayerNorm from its saved row statistics.");

namespace {

// Rows handed to one thread at a time: enough work to amortise scheduling.
int64_t CostPerRow(int64_t width) { return 8 * width; }

absl::Status CheckShapes(const Tensor& x, const Tensor& gamma) {
  if (!TensorShapeUtils::IsMatrix(x.shape())) {
    return InvalidArgument("x must be [rows, width], got ", x.shape().DebugString());
  }
  if (gamma.dims() != 1 || gamma.dim_size(0) != x.dim_size(1)) {
    return InvalidArgument("gamma must be [", x.dim_size(1), "], got ", gamma.shape().DebugString());
  }
  return absl::OkStatus();
}

class LayerNormOp : public OpKernel {
 public:
  explicit LayerNormOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("epsilon", &epsilon_));
    OP_REQUIRES(c, epsilon_ > 0.f, InvalidArgument("epsilon must be > 0, got ", epsilon_));
  }

  void Compute(OpKernelContext* c) override {
    const Tensor& x = c->input(0);
    const Tensor& gamma = c->input(1);
    const Tensor& beta = c->input(2);
    OP_REQUIRES_OK(c, CheckShapes(x, gamma));
    OP_REQUIRES(c, beta.shape() == gamma.shape(),
                InvalidArgument("beta must have gamma's shape, got ", beta.shape().DebugString()));
    const int64_t rows = x.dim_size(0), width = x.dim_size(1);
    Tensor *y, *mean, *inverse_std;
    OP_REQUIRES_OK(c, c->allocate_output(0, x.shape(), &y));
    OP_REQUIRES_OK(c, c->allocate_output(1, TensorShape({rows}), &mean));
    OP_REQUIRES_OK(c, c->allocate_output(2, TensorShape({rows}), &inverse_std));
    if (rows == 0 || width == 0) return;

    const float* xp = x.flat<float>().data();
    const float* g = gamma.flat<float>().data();
    const float* b = beta.flat<float>().data();
    float* yp = y->flat<float>().data();
    float* mp = mean->flat<float>().data();
    float* sp = inverse_std->flat<float>().data();
    const float epsilon = epsilon_;
    auto normalize_rows = [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* xr = xp + r * width;
        float* yr = yp + r * width;
        float sum = 0.f;
#pragma omp simd reduction(+ : sum)
        for (int64_t i = 0; i < width; ++i) sum += xr[i];
        const float m = sum / width;
        float squares = 0.f;  // two passes over a row in L1: exact for large means
#pragma omp simd reduction(+ : squares)
        for (int64_t i = 0; i < width; ++i) squares += (xr[i] - m) * (xr[i] - m);
        const float s = 1.f / std::sqrt(squares / width + epsilon);
#pragma omp simd
        for (int64_t i = 0; i < width; ++i) yr[i] = (xr[i] - m) * s * g[i] + b[i];
        mp[r] = m;
        sp[r] = s;
      }
    };
    c->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(rows, CostPerRow(width),
                                                                       normalize_rows);
  }

 private:
  float epsilon_;
};

class LayerNormGradOp : public OpKernel {
 public:
  explicit LayerNormGradOp(OpKernelConstruction* c) : OpKernel(c) {}

  // dx = s·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)) with ĝ = γ·dy, x̂ = (x − μ)·s;
  // dγ = Σ_rows dy·x̂, dβ = Σ_rows dy, summed per block of rows, then added.
  void Compute(OpKernelContext* c) override {
    const Tensor& dy = c->input(0);
    const Tensor& x = c->input(1);
    const Tensor& gamma = c->input(2);
    const Tensor& mean = c->input(3);
    const Tensor& inverse_std = c->input(4);
    OP_REQUIRES_OK(c, CheckShapes(x, gamma));
    OP_REQUIRES(c, dy.shape() == x.shape(),
                InvalidArgument("dy must have x's shape, got ", dy.shape().DebugString()));
    const int64_t rows = x.dim_size(0), width = x.dim_size(1);
    OP_REQUIRES(c, mean.NumElements() == rows && inverse_std.NumElements() == rows,
                InvalidArgument("mean and inverse_std must be [", rows, "]"));
    Tensor *dx, *dgamma, *dbeta;
    OP_REQUIRES_OK(c, c->allocate_output(0, x.shape(), &dx));
    OP_REQUIRES_OK(c, c->allocate_output(1, gamma.shape(), &dgamma));
    OP_REQUIRES_OK(c, c->allocate_output(2, gamma.shape(), &dbeta));
    float* dgp = dgamma->flat<float>().data();
    float* dbp = dbeta->flat<float>().data();
    std::fill(dgp, dgp + width, 0.f);
    std::fill(dbp, dbp + width, 0.f);
    if (rows == 0 || width == 0) return;

    const float* dyp = dy.flat<float>().data();
    const float* xp = x.flat<float>().data();
    const float* g = gamma.flat<float>().data();
    const float* mp = mean.flat<float>().data();
    const float* sp = inverse_std.flat<float>().data();
    float* dxp = dx->flat<float>().data();
    auto* workers = c->device()->tensorflow_cpu_worker_threads()->workers;
    // One block of rows per thread, each with its own dγ/dβ partial sums:
    // the block count fixes the summation order, so results are reproducible.
    const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(workers->NumThreads(), rows));
    const int64_t rows_per_block = (rows + blocks - 1) / blocks;
    std::vector<float> partial(2 * blocks * width, 0.f);
    auto backprop_blocks = [&](int64_t first, int64_t last) {
      for (int64_t block = first; block < last; ++block) {
        float* pg = partial.data() + 2 * block * width;
        float* pb = pg + width;
        const int64_t begin = block * rows_per_block;
        const int64_t end = std::min(rows, begin + rows_per_block);
        for (int64_t r = begin; r < end; ++r) {
          const float* xr = xp + r * width;
          const float* dyr = dyp + r * width;
          float* dxr = dxp + r * width;
          const float m = mp[r], s = sp[r];
          float mean_g = 0.f, mean_gx = 0.f;
#pragma omp simd reduction(+ : mean_g, mean_gx)
          for (int64_t i = 0; i < width; ++i) {
            const float xh = (xr[i] - m) * s;
            const float gi = dyr[i] * g[i];
            mean_g += gi;
            mean_gx += gi * xh;
            pg[i] += dyr[i] * xh;
            pb[i] += dyr[i];
          }
          mean_g /= width;
          mean_gx /= width;
#pragma omp simd
          for (int64_t i = 0; i < width; ++i) {
            const float xh = (xr[i] - m) * s;
            dxr[i] = s * (dyr[i] * g[i] - mean_g - xh * mean_gx);
          }
        }
      }
    };
    workers->ParallelFor(blocks, rows_per_block * CostPerRow(width) * 2, backprop_blocks);
    for (int64_t block = 0; block < blocks; ++block) {
      const float* pg = partial.data() + 2 * block * width;
      for (int64_t i = 0; i < width; ++i) {
        dgp[i] += pg[i];
        dbp[i] += pg[width + i];
      }
    }
  }
};

REGISTER_KERNEL_BUILDER(Name("KerasTransformerLayerNorm").Device(::tensorflow::DEVICE_CPU), LayerNormOp);
REGISTER_KERNEL_BUILDER(Name("KerasTransformerLayerNormGrad").Device(::tensorflow::DEVICE_CPU), LayerNormGradOp);

}  // namespace
}  // namespace keras_transformer
