package charttest

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// cert-manager.io/v1 Issuer and Certificate, reduced to the fields the
// chart may set and transcribed from cert-manager's API reference, so that
// strict decoding catches a misspelt or misplaced field. They are not
// cert-manager's own Go types: its module would pull a large dependency
// tree into the repository for a test. A field the chart starts using must
// be added here, from the reference, first.

var certManagerGV = schema.GroupVersion{Group: "cert-manager.io", Version: "v1"}

func addCertManagerToScheme(s *runtime.Scheme) error {
	s.AddKnownTypeWithName(certManagerGV.WithKind("Certificate"), &cmCertificate{})
	s.AddKnownTypeWithName(certManagerGV.WithKind("Issuer"), &cmIssuer{})
	return nil
}

type cmCertificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              cmCertificateSpec `json:"spec"`
}

type cmCertificateSpec struct {
	SecretName     string                  `json:"secretName"`
	SecretTemplate *cmSecretTemplate       `json:"secretTemplate,omitempty"`
	CommonName     string                  `json:"commonName,omitempty"`
	Subject        *cmSubject              `json:"subject,omitempty"`
	Duration       *metav1.Duration        `json:"duration,omitempty"`
	RenewBefore    *metav1.Duration        `json:"renewBefore,omitempty"`
	DNSNames       []string                `json:"dnsNames,omitempty"`
	URIs           []string                `json:"uris,omitempty"`
	IPAddresses    []string                `json:"ipAddresses,omitempty"`
	IsCA           bool                    `json:"isCA,omitempty"`
	Usages         []string                `json:"usages,omitempty"`
	PrivateKey     *cmPrivateKey           `json:"privateKey,omitempty"`
	IssuerRef      cmIssuerObjectReference `json:"issuerRef"`
}

type cmSecretTemplate struct {
	Annotations map[string]string `json:"annotations,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
}

type cmSubject struct {
	Organizations       []string `json:"organizations,omitempty"`
	OrganizationalUnits []string `json:"organizationalUnits,omitempty"`
}

type cmPrivateKey struct {
	RotationPolicy string `json:"rotationPolicy,omitempty"` // Never | Always
	Encoding       string `json:"encoding,omitempty"`       // PKCS1 | PKCS8
	Algorithm      string `json:"algorithm,omitempty"`      // RSA | ECDSA | Ed25519
	Size           int    `json:"size,omitempty"`
}

type cmIssuerObjectReference struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`
	Group string `json:"group,omitempty"`
}

type cmIssuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              cmIssuerSpec `json:"spec"`
}

type cmIssuerSpec struct {
	SelfSigned *cmSelfSigned `json:"selfSigned,omitempty"`
	CA         *cmCAIssuer   `json:"ca,omitempty"`
}

type cmSelfSigned struct {
	CRLDistributionPoints []string `json:"crlDistributionPoints,omitempty"`
}

type cmCAIssuer struct {
	SecretName            string   `json:"secretName"`
	CRLDistributionPoints []string `json:"crlDistributionPoints,omitempty"`
	OCSPServers           []string `json:"ocspServers,omitempty"`
}

// cmKeyUsages are the usages cert-manager accepts (KeyUsage in its API).
var cmKeyUsages = map[string]bool{
	"signing": true, "digital signature": true, "content commitment": true, "key encipherment": true,
	"key agreement": true, "data encipherment": true, "cert sign": true, "crl sign": true,
	"encipher only": true, "decipher only": true, "any": true, "server auth": true, "client auth": true,
	"code signing": true, "email protection": true, "s/mime": true, "ipsec end system": true,
	"ipsec tunnel": true, "ipsec user": true, "timestamping": true, "ocsp signing": true,
	"microsoft sgc": true, "netscape sgc": true,
}

func (c *cmCertificate) DeepCopyObject() runtime.Object { return deepCopy(c) }
func (i *cmIssuer) DeepCopyObject() runtime.Object      { return deepCopy(i) }

func deepCopy[T any](in *T) *T {
	b, err := json.Marshal(in)
	if err != nil {
		panic(err)
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		panic(err)
	}
	return out
}
