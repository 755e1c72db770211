#!/bin/bash
# Builds the W4A16 test/bench binaries into .devbin-w4/ (standalone nvcc; no CMake needed).
set -e
cd "$(dirname "$0")/../.."
B=.devbin-w4; mkdir -p $B
NVCC="/usr/local/cuda/bin/nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -DNDEBUG -lineinfo -Iinclude -Isrc"
CXX="g++ -std=c++20 -O2 -Wall -Wextra -Werror -Wno-unused-parameter -Iinclude -Isrc -Itests -I/usr/local/cuda/include"
$CXX -c src/cuda/gemm/sm90_w4a16_weight_shuffle.cpp -o $B/shuffle.o
$CXX -c src/cuda/runtime/device_runtime.cpp -o $B/devrt.o
$CXX -c src/cuda/runtime/sm90_tensor_map.cpp -o $B/tmap.o
$CXX -c tests/cuda/gemm_w4/w4a16_grouped_gemm_test.cpp -o $B/test.o
$CXX -c tests/cuda/gemm_w4/w4a16_wgmma_test.cpp -o $B/test_wgmma.o
$CXX -c tests/cuda/gemm_w4/fp4_linear_test.cpp -o $B/test_linear.o
$CXX -c src/cpu/linear/fp4_linear_reference.cpp -o $B/linear_ref.o
$CXX -c src/cuda/linear/sm90_fp4_linear.cpp -o $B/linear.o
$NVCC -Xptxas -v -c src/cuda/gemm/sm90_w4a16_grouped_gemm.cu -o $B/gemm.o > $B/ptxas_gemm.log 2>&1 &
$NVCC -Xptxas -v -c src/cuda/gemm/sm90_w4a16_wgmma_gemm.cu -o $B/wgmma.o > $B/ptxas_wgmma.log 2>&1
$NVCC -c bench/w4a16/w4a16_bench.cu -o $B/bench.o
if [ "${1:-}" = "variants" ] || [ ! -x $B/w4a16_variants ]; then
  $NVCC -Xptxas -v bench/w4a16/w4a16_variants.cu $B/shuffle.o -o $B/w4a16_variants > $B/ptxas_variants.log 2>&1
fi
wait
g++ -o $B/w4a16_tests $B/test.o $B/test_wgmma.o $B/test_linear.o $B/linear_ref.o $B/linear.o $B/gemm.o $B/wgmma.o $B/tmap.o $B/shuffle.o $B/devrt.o -L/usr/local/cuda/lib64 -lgtest -lgtest_main -lcudart_static -lpthread -ldl -lrt
/usr/local/cuda/bin/nvcc -o $B/w4a16_bench $B/bench.o $B/gemm.o $B/wgmma.o $B/tmap.o $B/shuffle.o -lcublas
echo built
