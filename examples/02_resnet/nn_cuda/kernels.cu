// The layers' own small kernels as one unit: each unit pays nvcc's host pass over the CUDA
// and C++ headers (about 11 s a unit here), which is most of what these four files cost.
#include "add.cu"
#include "linear.cu"
#include "sgd.cu"
#include "softmax_cross_entropy.cu"
