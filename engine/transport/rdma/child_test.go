package rdma_test

func childMain(role string) int { return 2 }
