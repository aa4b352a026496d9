// How many clusters of 1 / 2 / 4 / 8 / 16 CTAs of a staged-kernel-like CTA (256 threads, one CTA per
// SM by its shared memory) an sm_90 GPU runs at once (cudaOccupancyMaxActiveClusters): a cluster
// must fit in one GPC, so this can be less than SMs / cluster size. Session 24's question: does a
// grid of 8-CTA clusters with fewer CTAs than SMs fit in one wave?
// Build and run on the device: nvcc -arch=sm_90a -o /tmp/cocc bench/device/cluster_occupancy.cu && /tmp/cocc
#include <cuda_runtime.h>

#include <cstdio>

__global__ void __launch_bounds__(256, 1) staged_like(float* out) {
  extern __shared__ float smem[];
  smem[threadIdx.x] = threadIdx.x;
  __syncthreads();
  if (out) out[blockIdx.x] = smem[threadIdx.x ^ 1];
}

int main() {
  int dev = 0, sms = 0;
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaFuncSetAttribute(staged_like, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  std::printf("%s: %d SMs\n", prop.name, sms);
  for (int smem_kb : {96, 120, 200}) {
    cudaFuncSetAttribute(staged_like, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_kb * 1024);
    for (int cs : {1, 2, 4, 8, 16}) {
      cudaLaunchConfig_t cfg = {};
      cudaLaunchAttribute attr;
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = cs;
      attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
      cfg.gridDim = dim3(cs * 64);
      cfg.blockDim = dim3(256);
      cfg.dynamicSmemBytes = smem_kb * 1024;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      int clusters = -1;
      const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, staged_like, &cfg);
      std::printf("smem %3d KB, cluster %2d: %3d clusters at once = %3d CTAs%s%s\n", smem_kb, cs, clusters,
                  clusters * cs, e == cudaSuccess ? "" : " error ", e == cudaSuccess ? "" : cudaGetErrorString(e));
    }
  }
  return 0;
}
