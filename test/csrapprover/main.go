// Command csrapprover approves the kubernetes.io/kubelet-serving CSRs of
// the test control plane of hack/cluster.sh, which kube-controller-manager
// does not approve (kubeadm leaves them to the administrator). It approves
// only what check allows — a node's request for its own serving
// certificate, for the addresses its Node has — and denies the rest of
// that signer's requests, logging each decision. Other signers' CSRs are
// not its business.
//
// It is part of the test machine's control plane, not of nodelet: a
// production cluster has its administrator or an approver of its own
// approve serving certificates.
//
// Usage: csrapprover --kubeconfig FILE
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// rescan is how often every undecided CSR is looked at again without an
// event (a decision that failed, say while the API server was away).
const rescan = 10 * time.Second

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the approver's identity")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*kubeconfig, log); err != nil {
		log.Error("csrapprover", "err", err)
		os.Exit(1)
	}
}

func run(kubeconfig string, log *slog.Logger) error {
	if kubeconfig == "" {
		return fmt.Errorf("--kubeconfig is required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	factory := informers.NewSharedInformerFactory(client, 0)
	csrs := factory.Certificates().V1().CertificateSigningRequests()
	nodes := factory.Core().V1().Nodes()
	kick := make(chan struct{}, 1)
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { kickNow(kick) },
		UpdateFunc: func(any, any) { kickNow(kick) },
	}
	for _, inf := range []cache.SharedIndexInformer{csrs.Informer(), nodes.Informer()} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("cache of %v not synced", typ)
		}
	}
	log.Info("caches synced; approving kubernetes.io/kubelet-serving CSRs of nodes for themselves")

	// said is the last thing logged of each undecided CSR, so that a CSR
	// waiting for its Node is logged once, not at every scan.
	said := map[string]string{}
	ticker := time.NewTicker(rescan)
	defer ticker.Stop()
	for {
		list, err := csrs.Lister().List(labels.Everything())
		if err != nil {
			return err
		}
		for _, csr := range list {
			if csr.Spec.SignerName != certificatesv1.KubeletServingSignerName || decided(csr) {
				delete(said, csr.Name)
				continue
			}
			var node *v1.Node
			if name := nodeOf(csr); name != "" {
				node, _ = nodes.Lister().Get(name) // nil when not found
			}
			v, why := check(csr, node)
			if v == skip {
				continue
			}
			if v == wait {
				if said[csr.Name] != why {
					log.Info("waiting", "csr", csr.Name, "requester", csr.Spec.Username, "why", why)
					said[csr.Name] = why
				}
				continue
			}
			if err := decide(ctx, client, csr, v, why); err != nil {
				log.Warn("not decided; trying again", "csr", csr.Name, "verdict", v.String(), "err", err)
				continue
			}
			if v == approve {
				log.Info("approved", "csr", csr.Name, "requester", csr.Spec.Username, "what", why)
			} else {
				log.Warn("denied", "csr", csr.Name, "requester", csr.Spec.Username, "why", why)
			}
			said[csr.Name] = v.String()
		}
		select {
		case <-ctx.Done():
			log.Info("stopping")
			return nil
		case <-kick:
		case <-ticker.C:
		}
	}
}

// decide approves or denies csr through its approval subresource.
func decide(ctx context.Context, client kubernetes.Interface, csr *certificatesv1.CertificateSigningRequest, v verdict, why string) error {
	csr = csr.DeepCopy()
	cond := certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: v1.ConditionTrue, Reason: "NodeServingCertificate",
		Message: "hack/cluster.sh's approver: " + why, LastUpdateTime: metav1.Now(),
	}
	if v == deny {
		cond.Type, cond.Reason = certificatesv1.CertificateDenied, "NotANodeServingCertificate"
	}
	csr.Status.Conditions = append(csr.Status.Conditions, cond)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
	return err
}

func kickNow(kick chan struct{}) {
	select {
	case kick <- struct{}{}:
	default:
	}
}
