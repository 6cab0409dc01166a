/* Prints the values and layouts a program compiled against nccl.h bakes
 * in: every enum value, the id's size, ncclConfig_t's field offsets and
 * initializer, the small structs' sizes. Compiled once against
 * streamcomm's header and once against NVIDIA's, the two outputs must be
 * equal. */
#include <nccl.h>

#include <stddef.h>
#include <stdio.h>

#define V(x) printf("%s %lld\n", #x, (long long)(x))
#define OFF(f) printf("offsetof(ncclConfig_t, %s) %zu\n", #f, offsetof(ncclConfig_t, f))

int main(void) {
  V(ncclSuccess); V(ncclUnhandledCudaError); V(ncclSystemError); V(ncclInternalError);
  V(ncclInvalidArgument); V(ncclInvalidUsage); V(ncclRemoteError); V(ncclInProgress);
  V(ncclTimeout); V(ncclNumResults);
  V(ncclInt8); V(ncclChar); V(ncclUint8); V(ncclInt32); V(ncclInt); V(ncclUint32);
  V(ncclInt64); V(ncclUint64); V(ncclFloat16); V(ncclHalf); V(ncclFloat32); V(ncclFloat);
  V(ncclFloat64); V(ncclDouble); V(ncclBfloat16); V(ncclFloat8e4m3); V(ncclFloat8e5m2);
  V(ncclNumTypes);
  V(ncclSum); V(ncclProd); V(ncclMax); V(ncclMin); V(ncclAvg); V(ncclNumOps); V(ncclMaxRedOp);
  V(ncclScalarDevice); V(ncclScalarHostImmediate);
  V(ncclStatGpuMemSuspend); V(ncclStatGpuMemSuspended); V(ncclStatGpuMemPersist);
  V(ncclStatGpuMemTotal);
  V(NCCL_UNIQUE_ID_BYTES); V(sizeof(ncclUniqueId)); V(NCCL_SPLIT_NOCOLOR);
  V(NCCL_CONFIG_UNDEF_INT);
  V(sizeof(ncclConfig_t));
  OFF(size); OFF(magic); OFF(version); OFF(blocking); OFF(cgaClusterSize); OFF(minCTAs);
  OFF(maxCTAs); OFF(netName); OFF(splitShare); OFF(trafficClass); OFF(commName);
  OFF(collnetEnable); OFF(CTAPolicy); OFF(shrinkShare); OFF(nvlsCTAs);
  OFF(nChannelsPerNetPeer); OFF(nvlinkCentricSched); OFF(graphUsageMode); OFF(numRmaCtx);
  OFF(maxP2pPeers); OFF(graphStreamOrdering);
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  V(c.size); V(c.magic); V(c.blocking); V(c.splitShare); V(c.graphStreamOrdering);
  V(sizeof(ncclSimInfo_t)); V(sizeof(ncclWaitSignalDesc_t)); V(sizeof(ncclRedOp_t));
  V(sizeof(ncclDataType_t)); V(sizeof(ncclResult_t));
  return 0;
}
